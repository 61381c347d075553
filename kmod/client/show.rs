// SPDX-License-Identifier: GPL-2.0

//! What the module's files show, formatted here: `nvpeer/stats/*` and `nvpeer/failures` under
//! `/sys/module/<name>/`, a GPU's totals under `nvpeer/gpus/GPU-<uuid>/`, and a line of
//! `/sys/kernel/debug/<name>/registrations`. The C glue keeps what Rust cannot express: the
//! attribute and seq_file tables, the kobjects, and the reader's view of a record (its pid and
//! cgroup namespaces, jiffies, the pin's keyed hash: inline kernel APIs), which it hands back
//! through `nvpeer_glue_*` calls.

use core::ffi::{c_void, CStr};
use core::fmt::{self, Write};

use kernel::ffi::c_char;

use crate::ffi;
use crate::gpus::{self, GpuName};
use crate::stats::{self, Stat};

/// A sysfs file's text in its page: at most `size - 1` bytes and a NUL, as `sysfs_emit` writes;
/// a longer text is cut.
struct Page<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Page<'a> {
    /// # Safety
    ///
    /// `buf` is writable for `size` bytes (at least 1) for `'a`, and nothing else uses them.
    unsafe fn new(buf: *mut c_char, size: usize) -> Self {
        // SAFETY: as the caller says.
        let buf = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        Self { buf, len: 0 }
    }

    /// Ends the text: its length, as a `show` returns it.
    fn end(self) -> isize {
        if let Some(nul) = self.buf.get_mut(self.len) {
            *nul = 0;
        }
        self.len as isize
    }
}

impl Write for Page<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len().saturating_sub(self.len + 1);
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The name of the glue's stats file `stat` (NUL-terminated, static); null past the last.
#[no_mangle]
pub(crate) extern "C" fn nvpeer_stat_name(stat: u32) -> *const c_char {
    Stat::from_index(stat).map_or(core::ptr::null(), |s| s.file_name().as_ptr().cast())
}

/// `nvpeer/stats/<stat>`: its value and a newline.
///
/// # Safety
///
/// `buf` is a sysfs `show` buffer of `size` bytes (at least 1).
#[no_mangle]
pub(crate) unsafe extern "C" fn nvpeer_show_stat(stat: u32, buf: *mut c_char, size: usize) -> isize {
    // SAFETY: as the caller says.
    let mut page = unsafe { Page::new(buf, size) };
    if let Some(stat) = Stat::from_index(stat) {
        // `write_str` never fails; a longer text is cut.
        let _ = writeln!(page, "{}", stats::value(stat));
    }
    page.end()
}

/// `nvpeer/failures`: `<callback> <errno> <count>` per non-zero cell, `other` for any errno
/// not counted apart.
///
/// # Safety
///
/// As for [`nvpeer_show_stat`].
#[no_mangle]
pub(crate) unsafe extern "C" fn nvpeer_show_failures(buf: *mut c_char, size: usize) -> isize {
    // SAFETY: as the caller says.
    let mut page = unsafe { Page::new(buf, size) };
    for (op, errno, n) in stats::failures() {
        let _ = match errno {
            Some(errno) => writeln!(page, "{} {} {}", op.name(), errno, n),
            None => writeln!(page, "{} other {}", op.name(), n),
        };
    }
    page.end()
}

/// A GPU's file `file` (`enum nvpeer_gpu_file`), of the glue's GPU `gpu` (`gpus`): `-ENODEV`
/// for a GPU not in the table.
///
/// # Safety
///
/// As for [`nvpeer_show_stat`]; called with no lock held while the registry is installed (the
/// directories go before it).
#[no_mangle]
pub(crate) unsafe extern "C" fn nvpeer_show_gpu(gpu: u32, file: u32, buf: *mut c_char, size: usize) -> isize {
    let Some(totals) = gpus::totals(gpu as usize) else {
        return -(kernel::bindings::ENODEV as isize);
    };
    let value = match file {
        ffi::nvpeer_gpu_file_NVPEER_GPU_PINNED_BYTES => totals.pinned_bytes,
        ffi::nvpeer_gpu_file_NVPEER_GPU_PINS => totals.pins,
        ffi::nvpeer_gpu_file_NVPEER_GPU_REGISTRATIONS => totals.registrations,
        _ => return -(kernel::bindings::EINVAL as isize),
    };
    // SAFETY: as the caller says.
    let mut page = unsafe { Page::new(buf, size) };
    let _ = writeln!(page, "{value}");
    page.end()
}

/// The records file's text, written into its seq_file as it is formatted.
struct Seq(*mut c_void);

impl Write for Seq {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // SAFETY: the seq_file whose `show` called `nvpeer_show_record` (its caller); the
        // bytes are readable for the call.
        unsafe { ffi::nvpeer_glue_seq_write(self.0, s.as_ptr().cast(), s.len()) };
        Ok(())
    }
}

impl Seq {
    /// `bytes` with every byte outside `0x21..=0x7e`, and `\`, as `\ooo` (as /proc/mounts), so
    /// that a field is one word; an empty field as `\000` and a lone `-` (our "none") as `\055`.
    fn escaped(&mut self, bytes: &[u8]) {
        let _ = match bytes {
            [] => self.write_str("\\000"),
            b"-" => self.write_str("\\055"),
            _ => bytes.iter().try_for_each(|&c| {
                if (0x21..=0x7e).contains(&c) && c != b'\\' {
                    self.write_char(char::from(c))
                } else {
                    write!(self, "\\{c:03o}")
                }
            }),
        };
    }
}

/// The bytes of a NUL-terminated string in `buf`, up to its end if it has no NUL.
fn until_nul(buf: &[c_char]) -> &[u8] {
    // SAFETY: `c_char` and `u8` have one layout; the slice is `buf`'s.
    let bytes = unsafe { core::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len()) };
    bytes.iter().position(|&b| b == 0).map_or(bytes, |n| &bytes[..n])
}

/// One line of the records file (kmod/README.md, "Who holds pinned GPU memory"): the header for
/// a null `view`. A process the reader cannot see (another pid namespace's) shows no more than
/// that it exists: no name, range, GPU or NIC (REVIEW-KMOD-3 T4-7); its pid is the reader's
/// namespace's, `-` once the process is gone; its cgroup relative to the reader's cgroup
/// namespace, as `/proc/<pid>/cgroup` shows it.
///
/// # Safety
///
/// `m` is the seq_file whose `show` calls this; `view` is null or a view filled by
/// `nvpeer_records_at` whose references are held; `path` is writable for `path_size` bytes
/// (at least 1).
#[no_mangle]
pub(crate) unsafe extern "C" fn nvpeer_show_record(
    m: *mut c_void,
    view: *const ffi::nvpeer_record_view,
    path: *mut c_char,
    path_size: usize,
) {
    let mut out = Seq(m);
    // SAFETY: null or a filled view (caller).
    let Some(view) = (unsafe { view.as_ref() }) else {
        let _ = out.write_str("# id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares\n");
        return;
    };
    let rec = &view.rec;
    let mut visible = false;
    // SAFETY: the record's thread group, a reference the view holds (caller).
    let tgid = unsafe { ffi::nvpeer_glue_reader_tgid(rec.tgid, &mut visible) };
    let _ = write!(out, "{} ", view.id);
    let _ = if tgid > 0 { write!(out, "{tgid} ") } else { out.write_str("- ") };
    if visible {
        out.escaped(until_nul(&rec.comm));
    } else {
        let _ = out.write_char('-');
    }
    let _ = out.write_char(' ');
    // SAFETY: the record's cgroup, null or a reference the view holds (caller); `path` is
    // writable for `path_size` bytes (caller).
    let path = if unsafe { ffi::nvpeer_glue_reader_cgroup_path(rec.cgroup, path, path_size) } {
        // SAFETY: on success the call wrote a NUL-terminated string within those bytes, which
        // nothing else uses while the line is written.
        unsafe { CStr::from_ptr(path.cast()) }.to_bytes()
    } else {
        b"?"
    };
    out.escaped(path);
    let _ = match view.has_gpu && visible {
        true => write!(out, " {}", GpuName::of(&view.gpu).as_str()),
        false => out.write_str(" -"),
    };
    let _ = match visible {
        true => write!(out, " {:#x} {} ", rec.va, rec.bytes),
        false => write!(out, " - {} ", rec.bytes),
    };
    // SAFETY: a static NUL-terminated string (`view_locked`).
    out.escaped(unsafe { CStr::from_ptr(view.client.cast()) }.to_bytes());
    let _ = out.write_char(' ');
    let nic = until_nul(&view.nic);
    if visible && !nic.is_empty() {
        out.escaped(nic);
    } else {
        let _ = out.write_char('-');
    }
    // SAFETY: as `client`.
    let state = unsafe { CStr::from_ptr(view.state.cast()) }.to_bytes();
    let _ = out.write_char(' ');
    out.escaped(state);
    // SAFETY: no precondition (reads jiffies).
    let age_ms = unsafe { ffi::nvpeer_glue_age_ms(rec.since) };
    let _ = write!(out, " {age_ms}");
    let _ = if view.pin.is_null() {
        out.write_str(" - - -\n")
    } else {
        // SAFETY: no precondition: the address is hashed, never dereferenced.
        let pin = unsafe { ffi::nvpeer_glue_pin_hash(view.pin) };
        writeln!(out, " {pin} {} {}", view.pin_bytes, view.shares)
    };
}
