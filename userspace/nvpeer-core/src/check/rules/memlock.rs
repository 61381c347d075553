// SPDX-License-Identifier: MIT OR Apache-2.0
//! Memlock where jobs start. A job inherits RLIMIT_MEMLOCK from what starts it, not from the
//! admin's shell: Kubernetes sets none, so a pod gets containerd's (8 MiB by default under
//! systemd 253+), and `ibv_reg_mr` then fails with ENOMEM while NCCL silently falls back to TCP
//! (NVIDIA/nvidia-container-toolkit#2037). Rows: `memlock` (this process: the table's old row,
//! or under `check --as-job` the job's own limit and CapEff, with the fix for the runtime that
//! started it) and `job_memlock` (each job starter on this host and its limit).
//!
//! Where a MOFED/DOCA peer-memory core runs, peer-memory MRs count against the same limit: the
//! core charges their pages to the process's `pinned_vm` like host pages and uncharges them at
//! release (Mellanox/nic-kernel `drivers/infiniband/core/peer_mem.c`,
//! `ib_peer_umem_release`: `atomic64_sub(ib_umem_num_pages(umem), &umem->owning_mm->pinned_vm)`).

use crate::host::limits::{human_bytes, parse_systemd_limit, Memlock};

use super::super::{Check, JobStarter, ProcessFacts};
use super::Ctx;

/// `CAP_IPC_LOCK` (linux/capability.h): with it, `ib_umem_get` pins beyond RLIMIT_MEMLOCK.
const CAP_IPC_LOCK: u32 = 14;

/// A container runtime or scheduler that starts jobs, by the `comm` of its daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runtime {
    Containerd,
    Crio,
    Docker,
    Slurm,
    /// A Kubernetes pod whose runtime was not seen.
    Kubernetes,
}

impl Runtime {
    fn from_comm(comm: &str) -> Option<Self> {
        Some(match comm {
            "containerd" => Self::Containerd,
            "crio" => Self::Crio,
            "dockerd" => Self::Docker,
            "slurmd" => Self::Slurm,
            _ => return None,
        })
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Containerd => "containerd",
            Self::Crio => "CRI-O",
            Self::Docker => "Docker",
            Self::Slurm => "Slurm",
            Self::Kubernetes => "Kubernetes",
        }
    }

    /// How to give the jobs it starts an unlimited memlock limit.
    fn fix(self) -> &'static str {
        match self {
            Self::Containerd => "containerd: `systemctl edit containerd`, add `[Service]` `LimitMEMLOCK=infinity`, then `systemctl restart containerd`; containers started afterwards inherit it (Kubernetes sets no RLIMIT_MEMLOCK of its own)",
            Self::Crio => "CRI-O: `default_ulimits = [\"memlock=-1:-1\"]` under `[crio.runtime]` in /etc/crio/crio.conf (or a crio.conf.d drop-in), then `systemctl restart crio`",
            Self::Docker => "Docker: `\"default-ulimits\": {\"memlock\": {\"Name\": \"memlock\", \"Soft\": -1, \"Hard\": -1}}` in /etc/docker/daemon.json and `systemctl restart docker`, or `docker run --ulimit memlock=-1:-1`",
            Self::Slurm => "Slurm: `LimitMEMLOCK=infinity` for slurmd (`systemctl edit slurmd`, restart it) and `PropagateResourceLimitsExcept=MEMLOCK` in slurm.conf, else jobs get the submitting shell's limit",
            Self::Kubernetes => "Kubernetes sets no RLIMIT_MEMLOCK: raise the container runtime's (containerd: `LimitMEMLOCK=infinity` in containerd.service; CRI-O: `default_ulimits = [\"memlock=-1:-1\"]`), then restart it",
        }
    }
}

fn show(v: Option<u64>) -> String {
    v.map_or_else(|| "unlimited".to_owned(), human_bytes)
}

/// The note for hosts whose peer-memory core charges peer-memory MRs to `pinned_vm`.
fn pinned_vm_note(ctx: &Ctx) -> Option<&'static str> {
    ctx.f
        .ib_core
        .as_ref()
        .and_then(|c| c.peer_core.as_ref())
        .map(|_| "; peer-memory MRs count against it too: this host's MOFED/DOCA peer-memory core charges their pages to the process's pinned_vm like host pages (peer_mem.c)")
}

/// The `memlock` row: the calling process, plainly or (`--as-job`) as the job it runs in.
pub(super) fn row(ctx: &Ctx) -> Check {
    if ctx.options.as_job {
        return as_job(ctx);
    }
    let mut c = memlock(ctx);
    if c.status != super::super::Status::Ok {
        if let Some(n) = pinned_vm_note(ctx) {
            c.detail.push_str(n);
        }
    }
    c
}

/// The runtime that started this process: its cgroup path, then what marks a container or job,
/// then the one kind of job starter on this host.
fn runtime(ctx: &Ctx, p: &ProcessFacts) -> Option<(Runtime, String)> {
    let cgroup = p.cgroup.join(" ");
    let by_cgroup = if cgroup.contains("kubepods") {
        Some(
            if cgroup.contains("cri-containerd") || cgroup.contains("containerd") {
                Runtime::Containerd
            } else if cgroup.contains("crio") {
                Runtime::Crio
            } else if cgroup.contains("docker") {
                Runtime::Docker
            } else {
                Runtime::Kubernetes
            },
        )
    } else if cgroup.contains("docker") {
        Some(Runtime::Docker)
    } else if cgroup.contains("slurm") || (cgroup.contains("job_") && cgroup.contains("step_")) {
        Some(Runtime::Slurm)
    } else {
        None
    };
    if let Some(r) = by_cgroup {
        let line = p
            .cgroup
            .iter()
            .find(|l| l.starts_with("0::"))
            .or(p.cgroup.first())
            .map_or("", String::as_str);
        return Some((r, format!("its cgroup {line}")));
    }
    let marker = |m: &str| p.markers.iter().any(|x| x == m);
    let by_marker = if marker("KUBERNETES_SERVICE_HOST") {
        Some((Runtime::Kubernetes, "KUBERNETES_SERVICE_HOST is set"))
    } else if marker("SLURM_JOB_ID") {
        Some((Runtime::Slurm, "SLURM_JOB_ID is set"))
    } else if marker("/.dockerenv") {
        Some((Runtime::Docker, "/.dockerenv exists"))
    } else {
        None
    };
    if let Some((r, why)) = by_marker {
        // In a pod, the starters on the host (when visible) name the runtime.
        let seen = starters_runtime(ctx).filter(|s| *s != Runtime::Slurm);
        return Some(match (r, seen) {
            (Runtime::Kubernetes, Some(s)) => (s, format!("{why}, and {} runs here", s.describe())),
            _ => (r, why.to_owned()),
        });
    }
    starters_runtime(ctx).map(|r| {
        (
            r,
            format!("{} is the job starter on this host", r.describe()),
        )
    })
}

/// The one kind of job starter (kubelet aside) running on this host.
fn starters_runtime(ctx: &Ctx) -> Option<Runtime> {
    let mut kinds: Vec<Runtime> = Vec::new();
    for r in ctx
        .f
        .job_starters
        .as_ref()?
        .starters
        .iter()
        .filter_map(|s| Runtime::from_comm(&s.comm))
    {
        if !kinds.contains(&r) {
            kinds.push(r);
        }
    }
    match kinds.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

fn as_job(ctx: &Ctx) -> Check {
    let Some(m) = ctx.f.memlock else {
        return Check::new(
            "memlock",
            super::super::Status::Unknown,
            "--as-job: RLIMIT_MEMLOCK was not measured (facts of a run on another tree)".to_owned(),
            Some("run `nvpeer check --as-job` inside the pod or job step itself".to_owned()),
        );
    };
    let process = ctx.f.process.clone().unwrap_or_default();
    let ipc_lock = process.cap_eff.map(|c| c & (1 << CAP_IPC_LOCK) != 0);
    let caps = match (process.cap_eff, ipc_lock) {
        (Some(c), Some(true)) => format!("CapEff {c:016x} has CAP_IPC_LOCK"),
        (Some(c), _) => format!("CapEff {c:016x} has no CAP_IPC_LOCK"),
        (None, _) => "CapEff unknown".to_owned(),
    };
    let runtime = runtime(ctx, &process);
    let started = runtime.as_ref().map_or_else(String::new, |(r, why)| {
        format!("; started by {} ({why})", r.describe())
    });
    if m.soft.is_none() {
        return Check::ok(
            "memlock",
            format!("--as-job: RLIMIT_MEMLOCK unlimited; {caps}{started}"),
        );
    }
    let limit = format!(
        "--as-job: RLIMIT_MEMLOCK {} (hard {}), {caps}",
        show(m.soft),
        show(m.hard)
    );
    if ipc_lock == Some(true) {
        return Check::ok(
            "memlock",
            format!("{limit}: ib_umem_get pins beyond the limit with CAP_IPC_LOCK{started}"),
        );
    }
    let mut detail = format!("{limit}: registrations beyond {} fail with ENOMEM and NCCL silently falls back to TCP sockets (nvidia-container-toolkit#2037){started}", show(m.soft));
    if let Some(n) = pinned_vm_note(ctx) {
        detail.push_str(n);
    }
    let fix = runtime.map_or(
        "raise the limit where the job is started: the container runtime's or slurmd's systemd unit `LimitMEMLOCK=infinity`, `docker run --ulimit memlock=-1:-1`, or `ulimit -l unlimited` before the job",
        |(r, _)| r.fix(),
    );
    Check::fail("memlock", detail, fix)
}

/// What one starter passes on, for the row.
fn describe_starter(s: &JobStarter) -> String {
    let limit = s.memlock.map_or_else(
        || "limit not readable".to_owned(),
        |m| {
            if m.soft == m.hard {
                show(m.soft)
            } else {
                format!("{} (hard {})", show(m.soft), show(m.hard))
            }
        },
    );
    let mut out = format!("{} (pid {}) {limit}", s.comm, s.pid);
    match (&s.unit, &s.unit_limit_memlock) {
        (Some(u), Some(v)) => out.push_str(&format!(
            ", {u} LimitMEMLOCK={v}{}",
            s.unit_limit_from
                .as_deref()
                .map_or_else(String::new, |f| format!(" in {f}"))
        )),
        (Some(u), None) => out.push_str(&format!(", {u} sets no LimitMEMLOCK")),
        (None, _) => {}
    }
    if s.comm == "kubelet" {
        out.push_str(" (pods get the container runtime's limit, not kubelet's)");
    }
    out
}

/// The `job_memlock` row (not under `--as-job`, which judges the calling process alone).
pub(super) fn starters_row(ctx: &Ctx) -> Option<Check> {
    if ctx.options.as_job {
        return None;
    }
    if let Some(e) = ctx.unreadable("job_starters") {
        return Some(Check::error("job_memlock", e));
    }
    let Some(j) = &ctx.f.job_starters else {
        return Some(Check::not_examined(
            "job_memlock",
            "the facts have no job_starters (an older nvpeer made them)",
        ));
    };
    if j.starters.is_empty() {
        return Some(Check::not_applicable(
            "job_memlock",
            "no job starter runs here (slurmd, containerd, dockerd, crio, kubelet in /proc/*/comm)",
        ));
    }
    let listed = j
        .starters
        .iter()
        .map(describe_starter)
        .collect::<Vec<_>>()
        .join(", ");
    let limited: Vec<&JobStarter> = j
        .starters
        .iter()
        .filter(|s| s.comm != "kubelet")
        .filter(|s| s.memlock.is_some_and(|m: Memlock| m.soft.is_some()))
        .collect();
    if limited.is_empty() {
        return Some(Check::ok("job_memlock", listed));
    }
    let mut detail = format!(
        "jobs inherit a finite RLIMIT_MEMLOCK: {listed}: their registrations beyond it fail with ENOMEM and NCCL falls back to TCP (nvidia-container-toolkit#2037)"
    );
    if let Some(d) = &j.default_limit_memlock {
        if parse_systemd_limit(d).is_some_and(|m| m.soft.is_some()) {
            detail.push_str(&format!(
                "; systemd's DefaultLimitMEMLOCK={d} applies to every unit without its own"
            ));
        }
    }
    if let Some(n) = pinned_vm_note(ctx) {
        detail.push_str(n);
    }
    let mut fixes: Vec<&str> = Vec::new();
    for r in limited.iter().filter_map(|s| Runtime::from_comm(&s.comm)) {
        if !fixes.contains(&r.fix()) {
            fixes.push(r.fix());
        }
    }
    Some(Check::warn("job_memlock", detail, fixes.join("; ")))
}

/// The `memlock` row of this process, as measured.
fn memlock(ctx: &Ctx) -> Check {
    check_memlock(ctx.f.memlock)
}

pub(in crate::check) fn check_memlock(memlock: Option<Memlock>) -> Check {
    let Some(m) = memlock else {
        return Check::not_applicable(
            "memlock",
            "not measured: the trees are not this host's (--sysfs-root/--procfs-root), so this process's limit says nothing of theirs; `job_memlock` judges the job starters",
        );
    };
    let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), human_bytes);
    match m.soft {
        None => Check::ok("memlock", "RLIMIT_MEMLOCK unlimited"),
        Some(_) => Check::warn(
            "memlock",
            format!("RLIMIT_MEMLOCK is {} (hard {}): under MOFED 5.x registered GPU memory counts against it, so large registrations fail with ENOMEM", show(m.soft), show(m.hard)),
            "raise it to unlimited: `ulimit -l unlimited`, `* - memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity for systemd services, --ulimit memlock=-1 for containers",
        ),
    }
}
