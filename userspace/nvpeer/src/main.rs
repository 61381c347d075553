//! `nvpeer`: the companion CLI of the nvpeer GPUDirect RDMA peer-memory module.
//!
//! Exit codes: 0 ready / success, 1 a check failed (`nccl-log`: not every network connection
//! was GDRDMA), 2 usage error (clap) or an error that kept the command from running (one line
//! on stderr); `check --exit-codes nagios`: 0 ok, 1 warning, 2 critical, 3 unknown.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use nvpeer_core::bench::cuda_alloc::CudaAlloc;
use nvpeer_core::bench::engine::SideOpts;
use nvpeer_core::bench::mem::{MemKind, RegPath};
use nvpeer_core::bench::{self, BenchError, BenchOpts, Mode, Op};
use nvpeer_core::check::brief::{self, ExitCodes, NAGIOS_UNKNOWN};
use nvpeer_core::check::{self, Inputs};
use nvpeer_core::host::Host;
use nvpeer_core::{metrics, nccl_log, render, selftest, stats, topo};

mod gendocs;

#[derive(Parser)]
#[command(
    name = "nvpeer",
    version,
    about = "Verify and measure GPUDirect RDMA through the nvpeer peer-memory module",
    after_help = "Exit codes: 0 ready / success, 1 a check failed, 2 usage error or a failure to run \
                  (check --exit-codes nagios: 0 ok, 1 warning, 2 critical, 3 unknown)."
)]
struct Cli {
    /// Root of the sysfs tree to read (for fixtures and containers).
    #[arg(long, global = true, default_value = "/sys", value_name = "DIR")]
    sysfs_root: PathBuf,
    /// Root of the procfs tree to read.
    #[arg(long, global = true, default_value = "/proc", value_name = "DIR")]
    procfs_root: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check that this host is ready for GPUDirect RDMA; exit 0 when ready, 1 when a check fails
    /// (with --strict: or warns).
    Check {
        /// Print the report as JSON (schema nvpeer.check/1).
        #[arg(long)]
        json: bool,
        /// Print one line, the same on every healthy host: `nvpeer: ready`, or
        /// `nvpeer: not ready: <id> (<reason>), ...` (for clush -b / dshbak -c).
        #[arg(long)]
        brief: bool,
        /// Count warnings as failures (exit code, --brief line).
        #[arg(long)]
        strict: bool,
        /// Exit codes: default (0 ready, 1 not ready, 2 error) or nagios (0 ok, 1 warning,
        /// 2 critical, 3 unknown: the host could not be read).
        #[arg(long, value_enum, default_value = "default", value_name = "STYLE")]
        exit_codes: ExitCodesArg,
        /// Judge the facts of a saved `check --json` (a report from another node, or its bare
        /// `facts` object) instead of this host; FILE `-` reads standard input.
        #[arg(long, value_name = "FILE")]
        facts: Option<String>,
    },
    /// Show the GPU x NIC PCIe topology (nvidia-smi topo -m classes, NCCL's path types).
    Topo {
        /// Print the topology as JSON (schema nvpeer.topo/1).
        #[arg(long)]
        json: bool,
    },
    /// Show the module's counters and MOFED's memory_peers counters.
    Stats {
        /// Print the counters as JSON (schema nvpeer.stats/1; one object per line with --watch).
        #[arg(long)]
        json: bool,
        /// Refresh every N seconds until interrupted, with the change since the last refresh.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=86400))]
        watch: Option<u64>,
        /// With --watch: stop after this many refreshes.
        #[arg(long, value_name = "COUNT", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
        /// Output format: table (default), json (= --json) or prometheus (the text exposition
        /// format, with the verdict of every `check`, for node_exporter's textfile collector).
        #[arg(long, value_name = "FORMAT")]
        format: Option<String>,
        /// Write the prometheus format to DIR/nvpeer.prom atomically (a temporary file in DIR,
        /// then a rename), for node_exporter's --collector.textfile.directory=DIR.
        #[arg(long, value_name = "DIR")]
        textfile: Option<PathBuf>,
    },
    /// Measure RDMA transfers (write, read, send, write-with-immediate) per message size, from
    /// host or GPU memory; loopback on one device, or `--server` and `bench HOST` over TCP.
    Bench(Box<BenchArgs>),
    /// Read an NCCL_DEBUG=INFO log: per NET device whether NCCL enabled GPU Direct RDMA and
    /// why not, per connection whether it was GDRDMA; exit 0 only when every network
    /// connection was.
    NcclLog {
        /// The log file, or `-` for standard input.
        #[arg(value_name = "FILE")]
        file: String,
        /// Print the result as JSON (schema nvpeer.nccl-log/1).
        #[arg(long)]
        json: bool,
    },
    /// Prove that a GPU registration goes through the module: allocate, register, move a
    /// verified pattern, deregister, free, and compare the module's counters.
    Selftest {
        /// Memory to test (default: CUDA when a driver is present, else the nv_p2p_sim stand-in).
        #[arg(long, value_enum)]
        mem: Option<MemArg>,
        /// How CUDA memory is allocated.
        #[arg(long, value_enum, default_value = "device")]
        alloc: AllocArg,
        /// Bytes to allocate and register (rounded up to 64 KiB GPU pages).
        #[arg(long, default_value_t = 2 << 20, value_parser = parse_size)]
        size: usize,
        /// RDMA device (default: the first one).
        #[arg(short = 'd', long)]
        device: Option<String>,
        /// CUDA device ordinal.
        #[arg(long, default_value_t = 0)]
        gpu: i32,
        /// Print the report as JSON (schema nvpeer.selftest/1).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExitCodesArg {
    Default,
    Nagios,
}

impl From<ExitCodesArg> for ExitCodes {
    fn from(e: ExitCodesArg) -> Self {
        match e {
            ExitCodesArg::Default => ExitCodes::Default,
            ExitCodesArg::Nagios => ExitCodes::Nagios,
        }
    }
}

/// `--alloc`: the ways applications get CUDA memory (bench::cuda_alloc says which path each
/// registration then takes).
#[derive(Clone, Copy, clap::ValueEnum)]
enum AllocArg {
    /// cuMemAlloc (cudaMalloc)
    Device,
    /// cuMemCreate + cuMemMap with gpuDirectRDMACapable=1 (PyTorch expandable segments, Grace)
    Vmm,
    /// the same without gpuDirectRDMACapable: registration fails with EFAULT (Bad address)
    VmmNoRdma,
    /// cuMemAllocManaged (cudaMallocManaged): host pages, not GPUDirect RDMA
    Managed,
    /// mmap + cuMemHostRegister (cudaHostRegister): host pages, not GPUDirect RDMA
    HostRegistered,
}

impl From<AllocArg> for CudaAlloc {
    fn from(a: AllocArg) -> Self {
        match a {
            AllocArg::Device => CudaAlloc::Device,
            AllocArg::Vmm => CudaAlloc::Vmm,
            AllocArg::VmmNoRdma => CudaAlloc::VmmNoRdma,
            AllocArg::Managed => CudaAlloc::Managed,
            AllocArg::HostRegistered => CudaAlloc::HostRegistered,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum MemArg {
    Host,
    Cuda,
    /// nv_p2p_sim's "GPU memory" (test VM)
    Sim,
}

impl From<MemArg> for MemKind {
    fn from(m: MemArg) -> Self {
        match m {
            MemArg::Host => MemKind::Host,
            MemArg::Cuda => MemKind::Cuda,
            MemArg::Sim => MemKind::Sim,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OpArg {
    Write,
    Read,
    Send,
    WriteImm,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum RegArg {
    /// ibv_reg_mr on the pointer (GPU memory: the peer-memory path, our module)
    Mr,
    /// cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr
    Dmabuf,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FormatArg {
    Human,
    Perftest,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Server to connect to (run `nvpeer bench --server` there); loopback when absent.
    host: Option<String>,
    /// Wait for one client, serve it, exit.
    #[arg(long, conflicts_with = "host")]
    server: bool,
    /// TCP port of the QP information exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Operation.
    #[arg(long, value_enum, default_value = "write")]
    op: OpArg,
    /// Measure latency instead of bandwidth.
    #[arg(long)]
    lat: bool,
    /// Bidirectional bandwidth: both sides post at once (a second connection carries the
    /// server's requests); per direction and the sum (perftest -b reports the sum).
    #[arg(short = 'b', long)]
    bidirectional: bool,
    /// Connect the queue pair through librdmacm (loaded at run time; both sides): the server
    /// listens on an RDMA CM id on its address and -p port, the client resolves and connects;
    /// buffer address and rkey in the private data. Loopback binds to the device's IPv4 address.
    #[arg(long)]
    rdma_cm: bool,
    /// Message size in bytes (K/M suffixes; default 65536, 2 with --lat).
    #[arg(short = 's', long, value_parser = parse_size, conflicts_with = "all")]
    size: Option<usize>,
    /// Every size from 2 B to 8 MiB.
    #[arg(short = 'a', long)]
    all: bool,
    /// Iterations per size (default 5000, 1000 with --lat).
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..))]
    iters: Option<u64>,
    /// Run each size for at least this many seconds (batches of --iters).
    #[arg(short = 'D', long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    duration: Option<u64>,
    /// Outstanding work requests (bandwidth).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=8192))]
    tx_depth: u32,
    /// Queue pairs, messages spread round-robin (bandwidth runs; -t is the total in flight).
    #[arg(short = 'q', long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    qps: u16,
    /// RDMA device (default: the first one).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Port of the RDMA device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// GID index (default: the first IPv4-mapped GID, as perftest on RoCE v2).
    #[arg(short = 'x', long = "gid-index")]
    gid_index: Option<i32>,
    /// Path MTU in bytes (256..4096; default: the port's active MTU).
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// Memory of the buffers [default: host; with --loopback-all: cuda].
    #[arg(long, value_enum)]
    mem: Option<MemArg>,
    /// How --mem cuda memory is allocated.
    #[arg(long, value_enum, default_value = "device")]
    alloc: AllocArg,
    /// How the buffer is registered.
    #[arg(long, value_enum, default_value = "mr")]
    reg: RegArg,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    gpu: i32,
    /// Verify every received byte (one message in flight; numbers are then not peak numbers).
    #[arg(long)]
    validate: bool,
    /// Also run each size through a host bounce buffer (copy time included) and recommend a
    /// size threshold for the direct path.
    #[arg(long)]
    compare_staged: bool,
    /// Server: the largest message accepted.
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    max_size: usize,
    /// Every GPU with its nearest NIC (`nvpeer topo`), the same loopback transfer per pair,
    /// pinned to the CPUs of the NIC's NUMA node; one row per pair. With --mem host or sim:
    /// every RDMA device once, with host memory. Exit 1 when a pair failed.
    #[arg(long, conflicts_with_all = ["host", "server", "device", "gpu", "lat", "compare_staged"])]
    loopback_all: bool,
    /// With --loopback-all: fail (exit 1) the pairs below this many Gb/s, one line each.
    #[arg(long, value_name = "GBPS", requires = "loopback_all", value_parser = parse_gbps)]
    min_gbps: Option<f64>,
    /// Print JSON (schema nvpeer.bench/1; with --loopback-all nvpeer.bench-loopback-all/1).
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// Text layout: our table or perftest's columns.
    #[arg(long, value_enum, default_value = "human")]
    format: FormatArg,
}

/// `--min-gbps`: a positive number.
fn parse_gbps(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of Gb/s")),
    }
}

/// "4096", "4K", "1M", "8MiB".
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mult) = match t.trim_end_matches("iB").trim_end_matches('B') {
        x if x.ends_with(['k', 'K']) => (&x[..x.len() - 1], 1usize << 10),
        x if x.ends_with(['m', 'M']) => (&x[..x.len() - 1], 1 << 20),
        x if x.ends_with(['g', 'G']) => (&x[..x.len() - 1], 1 << 30),
        x => (x, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (bytes, or with K/M/G)"))?;
    let v = n
        .checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))?;
    if v == 0 || v > 1 << 30 {
        return Err(format!("{s:?}: sizes are 1 byte .. 1 GiB"));
    }
    Ok(v)
}

/// Where output goes; a closed pipe (`nvpeer stats --watch 1 | head`) ends the command quietly.
struct Out {
    stdout: std::io::Stdout,
    color: bool,
}

impl Out {
    fn new() -> Self {
        let stdout = std::io::stdout();
        let color = stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self { stdout, color }
    }

    fn print(&mut self, text: &str) -> std::io::Result<()> {
        let mut lock = self.stdout.lock();
        lock.write_all(text.as_bytes())?;
        lock.flush()
    }
}

/// A mistyped `--sysfs-root`/`--procfs-root` must not read as "nothing installed".
fn check_root(flag: &str, path: &std::path::Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{flag} {}: not a directory", path.display())),
        Err(e) => Err(format!("{flag} {}: {e}", path.display())),
    }
}

fn main() -> ExitCode {
    // `nvpeer __generate-docs OUTDIR`: man pages and completions (packaging).
    if let Some(code) = gendocs::intercept::<Cli>() {
        return code;
    }
    let cli = Cli::parse();
    for (flag, path) in [
        ("--sysfs-root", &cli.sysfs_root),
        ("--procfs-root", &cli.procfs_root),
    ] {
        if let Err(e) = check_root(flag, path) {
            eprintln!("nvpeer: {e}");
            // Nagios reads stdout: the one line says why the host is UNKNOWN.
            if let Command::Check {
                exit_codes: ExitCodesArg::Nagios,
                ..
            } = cli.command
            {
                println!("nvpeer: unknown: {e}");
                return ExitCode::from(NAGIOS_UNKNOWN);
            }
            return ExitCode::from(2);
        }
    }
    let host = Host::new(&cli.sysfs_root, &cli.procfs_root);
    let mut out = Out::new();
    let result = match cli.command {
        Command::Check {
            json,
            brief,
            strict,
            exit_codes,
            facts,
        } => {
            if json && brief {
                eprintln!(
                    "nvpeer check: --brief is one line of text; it cannot be combined with --json"
                );
                return ExitCode::from(2);
            }
            let form = if json {
                CheckForm::Json
            } else if brief {
                CheckForm::Brief
            } else {
                CheckForm::Table
            };
            run_check(
                &host,
                facts.as_deref(),
                form,
                strict,
                exit_codes.into(),
                &mut out,
            )
        }
        Command::Topo { json } => run_topo(&host, json, &mut out),
        Command::Stats {
            json,
            watch,
            count,
            format,
            textfile,
        } => match stats_form(json, watch.is_some(), format.as_deref(), textfile) {
            Ok(StatsForm::Prometheus(dest)) => {
                run_stats_prometheus(&host, dest.as_deref(), &mut out)
            }
            Ok(StatsForm::Text { json }) => run_stats(&host, json, watch, count, &mut out),
            Err(e) => {
                eprintln!("nvpeer stats: {e}");
                return ExitCode::from(2);
            }
        },
        Command::Bench(args) if args.loopback_all => run_loopback_all(&host, &args, &mut out),
        Command::Bench(args) => run_bench(&args, &mut out),
        Command::NcclLog { file, json } => run_nccl_log(&file, json, &mut out),
        Command::Selftest {
            mem,
            alloc,
            size,
            device,
            gpu,
            json,
        } => {
            let opts = selftest::SelftestOpts {
                mem: mem.map(Into::into),
                alloc: alloc.into(),
                size,
                device,
                gpu,
                port: 1,
                gid_index: None,
            };
            run_selftest(&host, &opts, json, &mut out)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvpeer: cannot write output: {e}");
            ExitCode::from(2)
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T, pretty: bool) -> std::io::Result<String> {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    text.map(|mut s| {
        s.push('\n');
        s
    })
    .map_err(std::io::Error::other)
}

#[derive(Clone, Copy)]
enum CheckForm {
    Table,
    Json,
    Brief,
}

/// `facts`: judge a saved report instead of `host` (`--facts FILE`); one that cannot be read is
/// one line on stderr and exit 2 (nagios: 3, UNKNOWN, with the line on stdout too).
fn run_check(
    host: &Host,
    facts: Option<&str>,
    form: CheckForm,
    strict: bool,
    codes: ExitCodes,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    // The same checks in every form: --brief reads sysfs/procfs and probes libibverbs like the
    // table (no CUDA context, no RDMA traffic), only the rendering differs.
    let report = match facts {
        None => check::run(host, &Inputs::live(host)),
        Some(file) => match check::read_facts(file) {
            Ok(facts) => check::report(facts),
            Err(e) => {
                eprintln!("nvpeer check: --facts: {e}");
                if codes == ExitCodes::Nagios {
                    out.print(&format!("nvpeer: unknown: {e}\n"))?;
                    return Ok(ExitCode::from(NAGIOS_UNKNOWN));
                }
                return Ok(ExitCode::from(2));
            }
        },
    };
    match form {
        CheckForm::Json => out.print(&to_json(&report, true)?)?,
        CheckForm::Brief => out.print(&brief::line(&report, strict))?,
        CheckForm::Table => {
            let color = out.color;
            out.print(&render::check(&report, color))?;
        }
    }
    Ok(ExitCode::from(brief::exit_code(&report, strict, codes)))
}

/// Exit 0 when every network connection was GDRDMA, 1 otherwise (some, none, no network
/// connection, no NCCL lines), 2 when the log cannot be read.
fn run_nccl_log(file: &str, json: bool, out: &mut Out) -> std::io::Result<ExitCode> {
    let report = match nccl_log::read(file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvpeer nccl-log: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if json {
        out.print(&to_json(&report, true)?)?;
    } else {
        out.print(&render::nccl_log(&report))?;
    }
    Ok(if report.summary.verdict == nccl_log::Verdict::All {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_topo(host: &Host, json: bool, out: &mut Out) -> std::io::Result<ExitCode> {
    let topology = match topo::discover(host) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("nvpeer topo: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if json {
        out.print(&to_json(&topology, true)?)?;
    } else {
        out.print(&render::topo(&topology))?;
    }
    Ok(ExitCode::SUCCESS)
}

enum StatsForm {
    /// The table, or JSON.
    Text { json: bool },
    /// The exposition format: on stdout, or into this textfile directory.
    Prometheus(Option<PathBuf>),
}

/// Which output `stats` was asked for; a contradiction or an unknown format is one line.
fn stats_form(
    json: bool,
    watch: bool,
    format: Option<&str>,
    textfile: Option<PathBuf>,
) -> Result<StatsForm, String> {
    let prometheus = match format {
        None => textfile.is_some(),
        Some("prometheus") => true,
        Some("table") | Some("json") if textfile.is_some() => {
            return Err(
                "--textfile writes the prometheus format; it cannot be combined with --format table or json"
                    .to_owned(),
            )
        }
        Some("table") if json => {
            return Err("--format table contradicts --json".to_owned())
        }
        Some("table") => false,
        Some("json") => return Ok(StatsForm::Text { json: true }),
        Some(other) => {
            return Err(format!(
                "unknown --format {other:?}: use table, json or prometheus"
            ))
        }
    };
    if !prometheus {
        return Ok(StatsForm::Text { json });
    }
    if json {
        return Err(
            "--json contradicts the prometheus format (--format prometheus, --textfile)".to_owned(),
        );
    }
    if watch {
        return Err(
            "--watch is for the table and --json; run --format prometheus / --textfile from a timer"
                .to_owned(),
        );
    }
    Ok(StatsForm::Prometheus(textfile))
}

/// `stats --format prometheus` / `--textfile DIR`: the counters and every check's verdict (the
/// checks as `check --brief` runs them: sysfs, procfs, the libibverbs probe; no CUDA context,
/// no RDMA traffic). Counters that cannot be read are one line on stderr and exit 2, after
/// the rest (with `nvpeer_stats_readable 0`) was written.
fn run_stats_prometheus(
    host: &Host,
    textfile: Option<&std::path::Path>,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let st = stats::read(host);
    let report = check::run(host, &Inputs::live(host));
    let text = metrics::render(&st, &report);
    match textfile {
        Some(dir) => {
            if let Err(e) = metrics::write_textfile(dir, &text) {
                let flag = match e {
                    metrics::TextfileError::Dir { .. }
                    | metrics::TextfileError::NotADirectory { .. } => "--textfile ",
                    _ => "",
                };
                eprintln!("nvpeer stats: {flag}{e}");
                return Ok(ExitCode::from(2));
            }
        }
        None => out.print(&text)?,
    }
    Ok(match st {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvpeer stats: {e}");
            ExitCode::from(2)
        }
    })
}

fn run_stats(
    host: &Host,
    json: bool,
    watch: Option<u64>,
    count: Option<u64>,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let Some(interval) = watch.map(Duration::from_secs) else {
        return Ok(match stats::read(host) {
            Ok(st) => {
                out.print(&if json {
                    to_json(&st, true)?
                } else {
                    render::stats(&st, None)
                })?;
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("nvpeer stats: {e}");
                ExitCode::from(2)
            }
        });
    };
    // Refreshes are scheduled on a fixed grid so that slow reads do not make the period drift;
    // a read error (module unloaded mid-read, ...) is reported and the watch goes on.
    let start = Instant::now();
    let mut previous: Option<stats::Stats> = None;
    let mut refresh: u64 = 0;
    loop {
        refresh += 1;
        match stats::read(host) {
            Ok(st) => {
                if json {
                    out.print(&to_json(&st, false)?)?;
                } else {
                    let mut text = String::new();
                    if out.color {
                        text.push_str("\x1b[H\x1b[2J");
                    } else if refresh > 1 {
                        text.push('\n');
                    }
                    text.push_str(&format!(
                        "Every {}s, refresh {refresh}\n",
                        interval.as_secs()
                    ));
                    text.push_str(&render::stats(&st, previous.as_ref()));
                    out.print(&text)?;
                }
                previous = Some(st);
            }
            Err(e) => eprintln!("nvpeer stats: {e}"),
        }
        if count.is_some_and(|c| refresh >= c) {
            return Ok(ExitCode::SUCCESS);
        }
        let due = interval.saturating_mul(u32::try_from(refresh).unwrap_or(u32::MAX));
        std::thread::sleep(due.saturating_sub(start.elapsed()));
    }
}

fn bench_opts(a: &BenchArgs) -> BenchOpts {
    let mode = if a.server {
        Mode::Server {
            bind: format!("0.0.0.0:{}", a.port),
        }
    } else if let Some(h) = &a.host {
        Mode::Client {
            addr: if h.contains(':') && !h.starts_with('[') {
                format!("[{h}]:{}", a.port)
            } else {
                format!("{h}:{}", a.port)
            },
        }
    } else {
        Mode::Loopback
    };
    let sizes = if a.all {
        bench::all_sizes()
    } else {
        vec![a.size.unwrap_or(if a.lat { 2 } else { 65536 })]
    };
    BenchOpts {
        mode,
        op: match a.op {
            OpArg::Write => Op::Write,
            OpArg::Read => Op::Read,
            OpArg::Send => Op::Send,
            OpArg::WriteImm => Op::WriteImm,
        },
        sizes,
        iters: a.iters.unwrap_or(if a.lat { 1000 } else { 5000 }),
        latency: a.lat,
        validate: a.validate,
        mem: a.mem.map_or(
            if a.loopback_all {
                MemKind::Cuda
            } else {
                MemKind::Host
            },
            Into::into,
        ),
        alloc: a.alloc.into(),
        reg: match a.reg {
            RegArg::Mr => RegPath::RegMr,
            RegArg::Dmabuf => RegPath::Dmabuf,
        },
        gpu: a.gpu,
        side: SideOpts {
            device: a.device.clone(),
            port: a.ib_port,
            gid_index: a.gid_index,
            depth: a.tx_depth,
            mtu: a.mtu,
            qps: usize::from(a.qps),
        },
        compare_staged: a.compare_staged,
        duration: a.duration.map(std::time::Duration::from_secs),
        max_size: a.max_size,
        bidirectional: a.bidirectional,
        rdma_cm: a.rdma_cm,
    }
}

/// Exit code of a bench/selftest error: 1 when data did not verify, 2 otherwise.
fn fail(cmd: &str, e: &BenchError) -> ExitCode {
    eprintln!("nvpeer {cmd}: {e}");
    if matches!(e, BenchError::Validation(_)) {
        ExitCode::from(1)
    } else {
        ExitCode::from(2)
    }
}

fn run_bench(a: &BenchArgs, out: &mut Out) -> std::io::Result<ExitCode> {
    let opts = bench_opts(a);
    if opts.alloc != CudaAlloc::Device && opts.mem != MemKind::Cuda {
        eprintln!("nvpeer bench: --alloc is how CUDA memory is allocated: it needs --mem cuda");
        return Ok(ExitCode::from(2));
    }
    if a.bidirectional && a.lat {
        eprintln!("nvpeer bench: -b/--bidirectional is for bandwidth runs, not with --lat");
        return Ok(ExitCode::from(2));
    }
    if let Some(m) = a.mtu {
        if bench::engine::mtu_enum(m).is_none() {
            eprintln!("nvpeer bench: --mtu {m}: use 256, 512, 1024, 2048 or 4096");
            return Ok(ExitCode::from(2));
        }
    }
    if opts.sizes.iter().any(|&s| s > opts.max_size) && !matches!(opts.mode, Mode::Client { .. }) {
        eprintln!(
            "nvpeer bench: message size above --max-size {}",
            opts.max_size
        );
        return Ok(ExitCode::from(2));
    }
    if let Mode::Server { .. } = opts.mode {
        return Ok(match bench::serve(&opts, &|line| eprintln!("{line}")) {
            Ok(peer) => {
                eprintln!(
                    "nvpeer bench server: client {} ({} memory, {}) done",
                    peer.device, peer.mem, peer.reg
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail("bench", &e),
        });
    }
    let progress_on = std::io::stderr().is_terminal() && opts.sizes.len() > 1;
    let progress = |i: usize, n: usize, size: usize| {
        eprint!("\r[{}/{}] {} bytes...   ", i + 1, n, size);
        if i + 1 == n {
            eprintln!();
        }
    };
    let result = bench::run(
        &opts,
        progress_on.then_some(&progress as bench::Progress<'_>),
    );
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            if matches!(e, BenchError::NoDevice(_) | BenchError::NoVerbs(_)) && opts.compare_staged
            {
                staged_only(&opts);
            }
            return Ok(fail("bench", &e));
        }
    };
    if a.json {
        out.print(&to_json(&report, true)?)?;
    } else if a.format == FormatArg::Perftest {
        out.print(&bench::report::perftest(&report))?;
    } else {
        out.print(&bench::report::human(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench --loopback-all`: the table (or JSON) on stdout, then one line per failing pair on
/// stderr; exit 1 when a pair is below --min-gbps or was not measured.
fn run_loopback_all(host: &Host, a: &BenchArgs, out: &mut Out) -> std::io::Result<ExitCode> {
    if a.format == FormatArg::Perftest {
        eprintln!(
            "nvpeer bench: --loopback-all prints one row per pair: not with --format perftest"
        );
        return Ok(ExitCode::from(2));
    }
    let opts = bench_opts(a);
    if opts.alloc != CudaAlloc::Device && opts.mem != MemKind::Cuda {
        eprintln!("nvpeer bench: --alloc is how CUDA memory is allocated: it needs --mem cuda");
        return Ok(ExitCode::from(2));
    }
    if let Some(m) = a.mtu {
        if bench::engine::mtu_enum(m).is_none() {
            eprintln!("nvpeer bench: --mtu {m}: use 256, 512, 1024, 2048 or 4096");
            return Ok(ExitCode::from(2));
        }
    }
    if opts.sizes.iter().any(|&s| s > opts.max_size) {
        eprintln!(
            "nvpeer bench: message size above --max-size {}",
            opts.max_size
        );
        return Ok(ExitCode::from(2));
    }
    let tty = std::io::stderr().is_terminal();
    let progress = |i: usize, n: usize, name: &str| {
        if tty {
            eprintln!("[{}/{}] {name}...", i + 1, n);
        }
    };
    let report = match bench::loopback_all::run(host, &opts, a.min_gbps, &progress) {
        Ok(r) => r,
        Err(e) => return Ok(fail("bench", &e)),
    };
    if a.json {
        out.print(&to_json(&report, true)?)?;
    } else {
        out.print(&report.table())?;
    }
    for line in report.failure_lines() {
        eprintln!("{line}");
    }
    Ok(if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Without an RDMA device, --compare-staged still measures the staging copies.
fn staged_only(opts: &BenchOpts) {
    let cuda = match bench::open_cuda(opts.mem, opts.gpu) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvpeer bench: {e}");
            return;
        }
    };
    match bench::staged_copy_times(opts.mem, opts.alloc, cuda.as_ref(), &opts.sizes) {
        Ok(rows) => {
            let mut s = format!(
                "staging copies ({} memory -> host bounce buffer, verified), per message:\n{:>10} {:>11} {:>11}\n",
                opts.mem.label(),
                "size",
                "copy us",
                "GB/s"
            );
            for (size, us) in rows {
                s.push_str(&format!(
                    "{:>10} {:>11.2} {:>11.3}\n",
                    bench::report::size_str(size as u64),
                    us,
                    size as f64 / us / 1e3
                ));
            }
            eprint!("{s}");
        }
        Err(e) => eprintln!("nvpeer bench: staging copies: {e}"),
    }
}

fn run_selftest(
    host: &Host,
    opts: &selftest::SelftestOpts,
    json: bool,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let r = selftest::run(host, opts);
    if json {
        out.print(&to_json(&r, true)?)?;
    } else {
        let mut s = format!(
            "nvpeer selftest: {} bytes of {} memory, registered through {}\n",
            r.size,
            if r.memory.is_empty() { "no" } else { &r.memory },
            if r.registration.is_empty() {
                "-"
            } else {
                &r.registration
            }
        );
        for st in &r.steps {
            let tag = match st.status {
                selftest::Status::Ok => "ok  ",
                selftest::Status::Fail => "FAIL",
                selftest::Status::Skip => "skip",
            };
            s.push_str(&format!("  [{tag}] {:<18} {}\n", st.name, st.detail));
        }
        s.push_str(if r.passed {
            "selftest passed\n"
        } else {
            "selftest FAILED\n"
        });
        out.print(&s)?;
    }
    Ok(if r.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
