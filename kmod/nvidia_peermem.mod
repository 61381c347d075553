./nvpeer_main.o
./nvpeer_glue.o
