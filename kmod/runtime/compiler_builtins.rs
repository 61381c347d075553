// SPDX-License-Identifier: GPL-2.0

//! The `compiler_builtins` crate every `no_std` crate links: empty, because the module's
//! object is linked with LTO and nothing it keeps calls a compiler intrinsic (the kernel
//! provides `memcpy` and its relatives). An intrinsic the code comes to need shows up as an
//! undefined symbol that modpost names at build time, never at load.

#![allow(internal_features)]
#![feature(compiler_builtins)]
#![compiler_builtins]
#![no_builtins]
#![no_std]
