//! Text renderings of a bench report: a human table and perftest's column layout.

use std::fmt::Write;

use super::BenchReport;

/// 2 B, 4 KiB, 1 MiB.
pub fn size_str(size: u64) -> String {
    if size >= 1 << 20 && size % (1 << 20) == 0 {
        format!("{} MiB", size >> 20)
    } else if size >= 1 << 10 && size % (1 << 10) == 0 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

/// The human table.
pub fn human(r: &BenchReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "nvpeer bench: RDMA {} {}, RC x {}, {} -> {}",
        r.op.name(),
        r.test,
        r.qps,
        r.device,
        r.peer_device
    );
    let _ = writeln!(s, "  local memory: {}, registered by {}", r.mem, r.reg);
    let _ = writeln!(
        s,
        "  peer memory:  {}, registered by {}",
        r.peer_mem, r.peer_reg
    );
    if let Some(g) = &r.gpu {
        let _ = writeln!(
            s,
            "  GPU {}: {} (CUDA driver API {}), GPUDirect RDMA {}, dma-buf {}",
            g.ordinal,
            g.name,
            super::cuda::version_str(g.driver_version),
            if g.gpudirect_rdma_supported {
                "supported"
            } else {
                "not supported"
            },
            if g.dmabuf_supported {
                "supported"
            } else {
                "not supported"
            }
        );
    }
    if let Some(m) = r.latency_method {
        let _ = writeln!(s, "  latency: {m}");
    }
    if r.validated {
        let total: u64 = r.rows.iter().map(|x| x.verified_bytes).sum();
        let _ = writeln!(
            s,
            "  validation: every message compared with its pattern ({total} bytes verified)"
        );
    }
    if r.bidirectional {
        let _ = writeln!(
            s,
            "  bidirectional: both sides posted at once; each size's first line is the sum, \
             then the requests of the client and of the server"
        );
    }
    if r.test == "bandwidth" {
        let _ = writeln!(
            s,
            "{:>10} {:>8} {:>12} {:>12} {:>12}",
            "size", "iters", "peak Gb/s", "avg Gb/s", "Mmsg/s"
        );
        for row in &r.rows {
            if let Some(b) = &row.bandwidth {
                let _ = writeln!(
                    s,
                    "{:>10} {:>8} {:>12.3} {:>12.3} {:>12.6}",
                    size_str(row.size),
                    row.iterations,
                    b.peak_gbps,
                    b.avg_gbps,
                    b.msg_rate_mpps
                );
            }
            for d in row.directions.iter().flatten() {
                let _ = writeln!(
                    s,
                    "{:>10} {:>8} {:>12.3} {:>12.3} {:>12.6}  by the {}{}",
                    "",
                    d.iterations,
                    d.bandwidth.peak_gbps,
                    d.bandwidth.avg_gbps,
                    d.bandwidth.msg_rate_mpps,
                    d.requester,
                    if r.validated {
                        format!(", {} bytes verified", d.verified_bytes)
                    } else {
                        String::new()
                    }
                );
            }
        }
    } else {
        let _ = writeln!(
            s,
            "{:>10} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "size", "iters", "min us", "median us", "avg us", "p99 us", "p99.9 us", "max us"
        );
        for row in &r.rows {
            if let Some(l) = &row.latency {
                let _ = writeln!(
                    s,
                    "{:>10} {:>8} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                    size_str(row.size),
                    row.iterations,
                    l.min_us,
                    l.median_us,
                    l.avg_us,
                    l.p99_us,
                    l.p99_9_us,
                    l.max_us
                );
            }
        }
    }
    if let Some(st) = &r.staged {
        let _ = writeln!(
            s,
            "\ndirect vs staged through a host bounce buffer (copy time included), per message:"
        );
        let _ = writeln!(
            s,
            "{:>10} {:>11} {:>11} {:>11} {:>11} {:>11}  winner",
            "size", "direct us", "copy us", "staged us", "direct Gb/s", "staged Gb/s"
        );
        for x in st {
            let _ = writeln!(
                s,
                "{:>10} {:>11.2} {:>11.2} {:>11.2} {:>11.3} {:>11.3}  {}",
                size_str(x.size),
                x.direct_us,
                x.copy_us,
                x.staged_us,
                x.direct_gbps,
                x.staged_gbps,
                x.winner
            );
        }
    }
    if let Some(rec) = &r.recommendation {
        let _ = writeln!(s, "recommendation: {rec}");
    }
    s
}

/// perftest's result block (`ib_write_bw` / `ib_write_lat` columns).
pub fn perftest(r: &BenchReport) -> String {
    let line =
        "---------------------------------------------------------------------------------------\n";
    let mut s = String::new();
    s.push_str(line);
    if r.test == "bandwidth" {
        s.push_str(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        );
        for row in &r.rows {
            if let Some(b) = &row.bandwidth {
                let _ = writeln!(
                    s,
                    " {:<10} {:<10}       {:.2}               {:.2}   \t\t   {:.6}",
                    row.size,
                    row.iterations,
                    b.peak_mbytes_per_s,
                    b.avg_mbytes_per_s,
                    b.msg_rate_mpps
                );
            }
        }
    } else {
        s.push_str(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n");
        for row in &r.rows {
            if let Some(l) = &row.latency {
                let _ = writeln!(
                    s,
                    " {:<7} {:<10}      {:.2}        {:.2}      {:.2}  \t       {:.2}     \t{:.2} \t\t{:.2} \t\t{:.2}",
                    row.size,
                    row.iterations,
                    l.min_us,
                    l.max_us,
                    l.median_us,
                    l.avg_us,
                    l.stdev_us,
                    l.p99_us,
                    l.p99_9_us
                );
            }
        }
    }
    s.push_str(line);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size_str(2), "2 B");
        assert_eq!(size_str(4096), "4 KiB");
        assert_eq!(size_str(1 << 20), "1 MiB");
        assert_eq!(size_str(1000), "1000 B");
    }
}
