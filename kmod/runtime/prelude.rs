// SPDX-License-Identifier: GPL-2.0

//! What `use kernel::prelude::*` brings in: the names the client takes from the kernel crate's
//! prelude.

pub use core::pin::Pin;

pub use crate::alloc::{flags::GFP_KERNEL, flags::GFP_NOWAIT, AllocError, Flags, KBox, KVec};
pub use crate::error::{code::*, Error, Result};
pub use crate::init::PinInit;
pub use crate::str::CStr;
pub use crate::{c_str, module, pr_alert, pr_crit, pr_debug, pr_emerg, pr_err, pr_info, pr_notice, pr_warn};
pub use crate::{Module, ThisModule};
