savedcmd_nvidia_peermem.mod := printf '%s\n'   nvpeer_main.o nvpeer_glue.o | awk '!x[$$0]++ { print("./"$$0) }' > nvidia_peermem.mod
