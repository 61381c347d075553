// SPDX-License-Identifier: MIT OR Apache-2.0
//! The clap definitions of `nvpeer`: the global flags, the subcommands and their arguments,
//! and the value enums with their nvpeer-core counterparts.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use nvpeer_core::check::brief::ExitCodes;
use nvpeer_core::check::{Require, Workload};
use nvpeer_core::commands::bench::cuda::DmabufMapping;
use nvpeer_core::commands::bench::cuda_alloc::CudaAlloc;
use nvpeer_core::commands::bench::mem::MemKind;

#[derive(Parser)]
#[command(
    name = "nvpeer",
    version,
    about = "Verify and measure GPUDirect RDMA: dma-buf, peer memory (the nvpeer module) or EFA, per GPU-NIC pair",
    after_help = "Exit codes: 0 ready / success, 1 a check failed, 2 usage error or a failure to run \
                  (check --exit-codes nagios: 0 ok, 1 warning, 2 critical, 3 unknown)."
)]
pub struct Cli {
    /// Root of the sysfs tree to read (for fixtures and containers).
    #[arg(long, global = true, default_value = "/sys", value_name = "DIR")]
    pub sysfs_root: PathBuf,
    /// Root of the procfs tree to read.
    #[arg(long, global = true, default_value = "/proc", value_name = "DIR")]
    pub procfs_root: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Check that this host is ready for GPUDirect RDMA and through which path (dma-buf, peer
    /// memory, EFA) per GPU-NIC pair; exit 0 when ready, 1 when not (with --strict: or a check
    /// warns).
    Check {
        /// Print the report as JSON (schema nvpeer.check/2).
        #[arg(long)]
        json: bool,
        /// Print one line, the same on every healthy host: `nvpeer: ready`, or
        /// `nvpeer: not ready: <id> (<reason>), ...` (for clush -b / dshbak -c).
        #[arg(long)]
        brief: bool,
        /// Count warnings and unknowns as failures (exit code, --brief line).
        #[arg(long)]
        strict: bool,
        /// Print every row, also those that do not apply to this host or run.
        #[arg(long)]
        all: bool,
        /// Exit codes: default (0 ready, 1 not ready, 2 error) or nagios (0 ok, 1 warning,
        /// 2 critical, 3 unknown: the host could not be read).
        #[arg(long, value_enum, default_value = "default", value_name = "STYLE")]
        exit_codes: ExitCodesArg,
        /// Judge the facts of a saved `check --json` (a report from another node, or its bare
        /// `facts` object) instead of this host; FILE `-` reads standard input.
        #[arg(long, value_name = "FILE")]
        facts: Option<String>,
        /// The path every GPU-NIC pair must have to be ready: any (dma-buf, peer memory or EFA),
        /// dmabuf, or peermem (a peer-memory client; on EFA efa_nv_peermem).
        #[arg(long, value_enum, default_value = "any", value_name = "PATH")]
        require: RequireArg,
        /// Judge a workload's own needs too: its rows (gin_*) fail instead of informing, and a
        /// ready verdict says "for GIN".
        #[arg(long = "for", value_enum, value_name = "WORKLOAD")]
        workload: Option<WorkloadArg>,
        /// Judge this process as the job it runs in (run it inside the pod or job step):
        /// its RLIMIT_MEMLOCK and CapEff, with the fix for the runtime that started it.
        #[arg(long)]
        as_job: bool,
        /// The node must have at least N NVIDIA GPUs (fewer fails `inventory`).
        #[arg(long, value_name = "N")]
        expect_gpus: Option<usize>,
        /// The node must have at least N RDMA NICs with a PCI function.
        #[arg(long, value_name = "N")]
        expect_nics: Option<usize>,
        /// Every NIC port must run at GBPS Gb/s or more (a port that lost lanes fails).
        #[arg(long, value_name = "GBPS", value_parser = clap::value_parser!(u32).range(1..))]
        expect_rate: Option<u32>,
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
    /// Read an NCCL_DEBUG=INFO log: did NCCL use GPU Direct RDMA, per NET device and per
    /// connection
    ///
    /// Per NET device whether NCCL enabled GPU Direct RDMA and why not, per connection whether
    /// it was GDRDMA, and NCCL's warnings.
    ///
    /// Exit status: 0 when every network connection was GDRDMA; 1 when some or none was (or
    /// NCCL fell back to NET/Socket); 2 for a usage error or an unreadable file; 3 for a file
    /// without NCCL lines; 4 for an NCCL log without a network connection.
    NcclLog {
        /// The log file, or `-` for standard input.
        #[arg(value_name = "FILE")]
        file: String,
        /// Print the result as JSON (schema nvpeer.nccl-log/1).
        #[arg(long)]
        json: bool,
    },
    /// Who holds pinned GPU memory: the module's registration records grouped by process,
    /// cgroup and GPU, and each GPU's pinned bytes next to its BAR1 size (root: the records are
    /// in debugfs).
    Who {
        /// Print the records and groups as JSON (schema nvpeer.who/1).
        #[arg(long)]
        json: bool,
        /// Print one line naming the biggest holders (for drain reasons and logs).
        #[arg(long, conflicts_with = "json")]
        brief: bool,
    },
    /// Unload the peer-memory module (before a network-stack or driver reload) when no
    /// registration is live; otherwise name the holders and exit 1.
    Detach {
        /// Wait up to this many seconds for the registrations to go.
        #[arg(long, value_name = "SECONDS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=86400))]
        wait: u64,
        /// Say what would be done; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the result as JSON (schema nvpeer.detach/1).
        #[arg(long)]
        json: bool,
    },
    /// Load the peer-memory module if its build provenance fits the running IB core, NVIDIA
    /// driver and kernel; otherwise say why in one line and exit 1 (run by nvpeer-attach.service
    /// when ib_uverbs is loaded).
    Attach {
        /// The module name to load.
        #[arg(long, default_value = "nvidia_peermem", value_parser = ["nvidia_peermem", "nv_peer_mem"])]
        module: String,
        /// Judge and say what would be done; load nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the result as JSON (schema nvpeer.attach/1).
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
pub enum RequireArg {
    /// dma-buf, peer memory or EFA
    Any,
    /// dma-buf for every pair
    Dmabuf,
    /// a peer-memory client for every pair (EFA: efa_nv_peermem)
    Peermem,
}

impl From<RequireArg> for Require {
    fn from(r: RequireArg) -> Self {
        match r {
            RequireArg::Any => Require::Any,
            RequireArg::Dmabuf => Require::Dmabuf,
            RequireArg::Peermem => Require::Peermem,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadArg {
    /// GPU-initiated networking: NCCL GIN (GDAKI), NVSHMEM IBGDA, DeepEP
    Gin,
}

impl From<WorkloadArg> for Workload {
    fn from(w: WorkloadArg) -> Self {
        match w {
            WorkloadArg::Gin => Workload::Gin,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExitCodesArg {
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
pub enum AllocArg {
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
pub enum MemArg {
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
pub enum OpArg {
    Write,
    Read,
    Send,
    WriteImm,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum RegArg {
    /// ibv_reg_mr on the pointer (GPU memory: the peer-memory path, our module)
    Mr,
    /// cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr
    Dmabuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum DmabufMappingArg {
    /// the driver's choice (flags 0)
    Default,
    /// CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE: the NIC reaches GPU memory over PCIe
    Pcie,
}

impl From<DmabufMappingArg> for DmabufMapping {
    fn from(m: DmabufMappingArg) -> Self {
        match m {
            DmabufMappingArg::Default => DmabufMapping::Default,
            DmabufMappingArg::Pcie => DmabufMapping::Pcie,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    Human,
    Perftest,
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Server to connect to (run `nvpeer bench --server` there); loopback when absent.
    pub host: Option<String>,
    /// Wait for one client, serve it, exit.
    #[arg(long, conflicts_with = "host")]
    pub server: bool,
    /// TCP port of the QP information exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// Operation [default: write; with --loopback-all: write, then read].
    #[arg(long, value_enum)]
    pub op: Option<OpArg>,
    /// Measure latency instead of bandwidth.
    #[arg(long)]
    pub lat: bool,
    /// Bidirectional bandwidth: both sides post at once (a second connection carries the
    /// server's requests); per direction and the sum (perftest -b reports the sum).
    #[arg(short = 'b', long)]
    pub bidirectional: bool,
    /// Connect the queue pair through librdmacm (loaded at run time; both sides): the server
    /// listens on an RDMA CM id on its address and -p port, the client resolves and connects;
    /// buffer address and rkey in the private data. Loopback binds to the device's IPv4 address.
    #[arg(long)]
    pub rdma_cm: bool,
    /// Message size in bytes (K/M suffixes; default 65536, 2 with --lat).
    #[arg(short = 's', long, value_parser = parse_size, conflicts_with = "all")]
    pub size: Option<usize>,
    /// Every size from 2 B to 8 MiB.
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Iterations per size (default 5000, 1000 with --lat).
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: Option<u64>,
    /// Run each size for at least this many seconds (batches of --iters).
    #[arg(short = 'D', long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub duration: Option<u64>,
    /// Outstanding work requests (bandwidth).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub tx_depth: u32,
    /// Queue pairs, messages spread round-robin (bandwidth runs; -t is the total in flight).
    #[arg(short = 'q', long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub qps: u16,
    /// RDMA device (default: the first one).
    #[arg(short = 'd', long = "ib-dev")]
    pub device: Option<String>,
    /// Port of the RDMA device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (default: the first IPv4-mapped GID, as perftest on RoCE v2).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<i32>,
    /// Path MTU in bytes (256..4096; default: the port's active MTU).
    #[arg(short = 'm', long)]
    pub mtu: Option<u32>,
    /// Memory of the buffers [default: host; with --loopback-all: cuda].
    #[arg(long, value_enum)]
    pub mem: Option<MemArg>,
    /// How --mem cuda memory is allocated.
    #[arg(long, value_enum, default_value = "device")]
    pub alloc: AllocArg,
    /// How the buffer is registered.
    #[arg(long, value_enum, default_value = "mr")]
    pub reg: RegArg,
    /// With --reg dmabuf: the mapping type the dma-buf export asks for (pcie:
    /// CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE, CUDA 12.8+, the Data Direct path on Grace).
    #[arg(long, value_enum, default_value = "default", value_name = "TYPE")]
    pub dmabuf_mapping: DmabufMappingArg,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: i32,
    /// Verify every received byte (one message in flight; numbers are then not peak numbers).
    #[arg(long)]
    pub validate: bool,
    /// With --loopback-all: skip the verification pass (by default each size's first 16
    /// messages of each direction are moved one at a time and every byte compared).
    #[arg(long, requires = "loopback_all", conflicts_with = "validate")]
    pub no_validate: bool,
    /// Draw bandwidth and latency against message size into FILE (SVG): the direct path and,
    /// with --compare-staged, the staged one with the crossover marked.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["server", "loopback_all"])]
    pub plot: Option<PathBuf>,
    /// Also run each size through a host bounce buffer (copy time included) and recommend a
    /// size threshold for the direct path.
    #[arg(long)]
    pub compare_staged: bool,
    /// Server: the largest message accepted.
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    pub max_size: usize,
    /// Every GPU with its nearest NIC (`nvpeer topo`), the same loopback transfer per pair,
    /// pinned to the CPUs of the NIC's NUMA node: RDMA write, then RDMA read (or --op), each
    /// verified first; a row per pair and direction. With --mem host or sim: every RDMA device
    /// once, with host memory. Exit 1 when a direction failed.
    #[arg(long, conflicts_with_all = ["host", "server", "device", "gpu", "lat", "compare_staged"])]
    pub loopback_all: bool,
    /// With --loopback-all: fail (exit 1) the pairs below this many Gb/s, one line each.
    #[arg(long, value_name = "GBPS", requires = "loopback_all", value_parser = parse_gbps)]
    pub min_gbps: Option<f64>,
    /// Print JSON (schema nvpeer.bench/1; with --loopback-all nvpeer.bench-loopback-all/2).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Text layout: our table or perftest's columns.
    #[arg(long, value_enum, default_value = "human")]
    pub format: FormatArg,
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
