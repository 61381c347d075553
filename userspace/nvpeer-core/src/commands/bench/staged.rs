// SPDX-License-Identifier: MIT OR Apache-2.0
//! `--compare-staged`: the same sizes through a host bounce buffer (the copy into it
//! included) and the size from which the direct path wins.

use std::sync::Arc;
use std::time::Instant;

use super::client::{join_error, make_buffer, Client};
use super::mem::{self, Buffer, MemKind, RegPath};
use super::runner::measure_all;
use super::{cuda, cuda_alloc, report, BenchError, BenchOpts, Row, StagedRow};

/// Per-message time of a row in microseconds.
fn per_message_us(r: &Row) -> f64 {
    match (&r.latency, &r.bandwidth) {
        (Some(l), _) => l.avg_us,
        (None, Some(b)) if b.msg_rate_mpps > 0.0 => 1.0 / b.msg_rate_mpps,
        _ => f64::INFINITY,
    }
}

/// Average time in microseconds to copy `size` bytes from the source memory into a host
/// bounce buffer (cuMemcpyDtoH for GPU memory, memcpy otherwise), verified once.
pub fn copy_time_us(
    src: &Buffer,
    bounce: &mut [u8],
    size: usize,
    reps: u32,
) -> Result<f64, BenchError> {
    let want = mem::pattern(size as u64, size);
    src.write(0, &want)?;
    src.read(0, &mut bounce[..size])?;
    if let Some(i) = mem::first_mismatch(&bounce[..size], &want) {
        return Err(BenchError::Validation(format!(
            "staged copy of {size} bytes: byte {i} differs"
        )));
    }
    let t = Instant::now();
    for _ in 0..reps {
        src.read(0, &mut bounce[..size])?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / f64::from(reps.max(1)))
}

/// The copy times alone (hosts without an RDMA device still learn the staging cost).
pub fn staged_copy_times(
    mem: MemKind,
    alloc: cuda_alloc::CudaAlloc,
    cuda: Option<&Arc<cuda::Cuda>>,
    sizes: &[usize],
) -> Result<Vec<(usize, f64)>, BenchError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    let (src, _) = make_buffer(mem, alloc, cuda, max, RegPath::RegMr)?;
    let mut bounce = vec![0u8; max];
    sizes
        .iter()
        .map(|&s| Ok((s, copy_time_us(&src, &mut bounce, s, reps_for(s))?)))
        .collect()
}

fn reps_for(size: usize) -> u32 {
    u32::try_from((64usize << 20) / size.max(1))
        .unwrap_or(u32::MAX)
        .clamp(3, 1000)
}

/// Runs the same sizes from a host bounce buffer and adds the copy into it.
pub(super) fn compare_staged(
    opts: &BenchOpts,
    cuda: Option<&Arc<cuda::Cuda>>,
    direct: &[Row],
) -> Result<(Vec<StagedRow>, String), BenchError> {
    let copies = staged_copy_times(opts.mem, opts.alloc, cuda, &opts.sizes)?;
    let half = opts.sizes.iter().copied().max().unwrap_or(1);
    let mut host_opts = opts.clone();
    host_opts.validate = false;
    let mut client = Client::connect(&host_opts, None, MemKind::Host, RegPath::RegMr, half)?;
    let host_rows = match measure_all(&mut client, &host_opts, None) {
        Ok(r) => r,
        Err(e) => {
            let server = client.server.take();
            drop(client);
            return Err(join_error(server, e));
        }
    };
    client.finish()?;
    let mut rows = Vec::new();
    for ((d, h), (size, copy)) in direct.iter().zip(&host_rows).zip(&copies) {
        let direct_us = per_message_us(d);
        let staged_us = per_message_us(h) + copy;
        let gbps = |us: f64| *size as f64 * 8.0 / (us * 1e3);
        rows.push(StagedRow {
            size: *size as u64,
            direct_us,
            copy_us: *copy,
            staged_us,
            direct_gbps: gbps(direct_us),
            staged_gbps: gbps(staged_us),
            winner: if direct_us <= staged_us {
                "direct"
            } else {
                "staged"
            },
        });
    }
    let rec = recommend(&rows);
    Ok((rows, rec))
}

/// The crossover: the smallest size from which the direct path wins at every larger size, when
/// the staged path wins somewhere below it (the threshold users pick a path by).
pub fn crossover(rows: &[StagedRow]) -> Option<u64> {
    let last_staged = rows.iter().rposition(|r| r.winner == "staged")?;
    rows.get(last_staged + 1).map(|r| r.size)
}

/// The one-line recommendation: the size from which the direct path wins at every larger size.
pub fn recommend(rows: &[StagedRow]) -> String {
    if !rows.iter().any(|r| r.winner == "staged") {
        return "direct path wins at every measured size: register GPU memory directly".to_owned();
    }
    match crossover(rows) {
        None => "staged path wins up to the largest measured size: the direct path did not pay off on this host".to_owned(),
        Some(size) => format!(
            "use the direct path for messages of {} and larger, stage smaller ones through host memory",
            report::size_str(size)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size: u64, direct: f64, staged: f64) -> StagedRow {
        StagedRow {
            size,
            direct_us: direct,
            copy_us: 0.0,
            staged_us: staged,
            direct_gbps: 0.0,
            staged_gbps: 0.0,
            winner: if direct <= staged { "direct" } else { "staged" },
        }
    }

    #[test]
    fn recommendation_names_the_crossover() {
        let rows = [
            row(2, 5.0, 3.0),
            row(4096, 6.0, 5.0),
            row(65536, 9.0, 12.0),
            row(1 << 20, 80.0, 200.0),
        ];
        assert_eq!(
            recommend(&rows),
            "use the direct path for messages of 64 KiB and larger, stage smaller ones through host memory"
        );
        assert_eq!(crossover(&rows), Some(65536));
        let all_direct = [row(2, 1.0, 3.0), row(4, 1.0, 3.0)];
        assert!(recommend(&all_direct).starts_with("direct path wins at every"));
        let none = [row(2, 5.0, 3.0)];
        assert!(recommend(&none).starts_with("staged path wins"));
        // A dip back to staged above a direct win moves the threshold up.
        let dip = [row(2, 1.0, 3.0), row(4, 5.0, 3.0), row(8, 1.0, 3.0)];
        assert!(recommend(&dip).contains("of 8 B and larger"));
    }
}
