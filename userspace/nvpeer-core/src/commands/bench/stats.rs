//! Latency percentiles and bandwidth figures of one (operation, size) run.

use std::time::Duration;

use serde::Serialize;

/// Latency in microseconds, perftest's columns plus p99.9.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Latency {
    pub min_us: f64,
    pub median_us: f64,
    pub avg_us: f64,
    pub p99_us: f64,
    pub p99_9_us: f64,
    pub max_us: f64,
    pub stdev_us: f64,
}

/// Nearest-rank percentile of sorted samples (perftest's: `sorted[ceil(p * n) - 1]`).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latency statistics of samples in nanoseconds; `None` without samples.
pub fn latency(samples_ns: &[f64]) -> Option<Latency> {
    if samples_ns.is_empty() {
        return None;
    }
    let mut s: Vec<f64> = samples_ns.iter().map(|v| v / 1000.0).collect();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len() as f64;
    let avg = s.iter().sum::<f64>() / n;
    let var = s.iter().map(|v| (v - avg) * (v - avg)).sum::<f64>() / n;
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    Some(Latency {
        min_us: s[0],
        median_us: median,
        avg_us: avg,
        p99_us: percentile(&s, 0.99),
        p99_9_us: percentile(&s, 0.999),
        max_us: s[s.len() - 1],
        stdev_us: var.sqrt(),
    })
}

/// Bandwidth of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bandwidth {
    pub avg_gbps: f64,
    pub peak_gbps: f64,
    pub avg_mbytes_per_s: f64,
    pub peak_mbytes_per_s: f64,
    pub msg_rate_mpps: f64,
}

/// Average over the whole run; peak over the best of ten consecutive windows of completions
/// (the whole run when it has fewer than 20 completions).
pub fn bandwidth(size: u64, completions: &[Duration], elapsed: Duration) -> Bandwidth {
    let n = completions.len() as f64;
    let secs = elapsed.as_secs_f64().max(1e-9);
    let avg_bps = n * size as f64 / secs;
    let mut peak_bps = avg_bps;
    if completions.len() >= 20 {
        let w = completions.len() / 10;
        let mut prev = Duration::ZERO;
        for chunk in completions.chunks(w) {
            let end = chunk[chunk.len() - 1];
            let dt = end.saturating_sub(prev).as_secs_f64();
            if dt > 0.0 {
                peak_bps = peak_bps.max(chunk.len() as f64 * size as f64 / dt);
            }
            prev = end;
        }
    }
    Bandwidth {
        avg_gbps: avg_bps * 8.0 / 1e9,
        peak_gbps: peak_bps * 8.0 / 1e9,
        avg_mbytes_per_s: avg_bps / 1_048_576.0,
        peak_mbytes_per_s: peak_bps / 1_048_576.0,
        msg_rate_mpps: n / secs / 1e6,
    }
}

/// The sum of the directions of a bidirectional run (perftest -b adds both sides' figures).
pub fn sum<'a>(parts: impl Iterator<Item = &'a Bandwidth>) -> Bandwidth {
    let mut t = Bandwidth {
        avg_gbps: 0.0,
        peak_gbps: 0.0,
        avg_mbytes_per_s: 0.0,
        peak_mbytes_per_s: 0.0,
        msg_rate_mpps: 0.0,
    };
    for b in parts {
        t.avg_gbps += b.avg_gbps;
        t.peak_gbps += b.peak_gbps;
        t.avg_mbytes_per_s += b.avg_mbytes_per_s;
        t.peak_mbytes_per_s += b.peak_mbytes_per_s;
        t.msg_rate_mpps += b.msg_rate_mpps;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let s: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&s, 0.99), 990.0);
        assert_eq!(percentile(&s, 0.999), 999.0);
        assert_eq!(percentile(&s, 0.5), 500.0);
        assert_eq!(percentile(&[7.0], 0.999), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn latency_of_samples() {
        let l = latency(&[3000.0, 1000.0, 2000.0, 4000.0]).expect("samples");
        assert_eq!(l.min_us, 1.0);
        assert_eq!(l.max_us, 4.0);
        assert_eq!(l.median_us, 2.5);
        assert_eq!(l.avg_us, 2.5);
        assert!(latency(&[]).is_none());
    }

    #[test]
    fn bandwidth_average_and_peak() {
        // 100 completions of 1 MB in one second; the last ten took a tenth of the time each
        // other window took: the peak is higher than the average.
        let mut c = Vec::new();
        for i in 1..=90u64 {
            c.push(Duration::from_micros(i * 10_000 * 10 / 9));
        }
        let t90 = c[89];
        for i in 1..=10u64 {
            c.push(t90 + Duration::from_micros(i * 100));
        }
        let b = bandwidth(1_000_000, &c, Duration::from_secs(1));
        assert!((b.avg_gbps - 0.8).abs() < 1e-9);
        assert!(b.peak_gbps > b.avg_gbps * 5.0);
        assert!((b.msg_rate_mpps - 0.0001).abs() < 1e-12);
    }

    #[test]
    fn bidirectional_sum_adds_both_directions() {
        let a = bandwidth(1000, &[Duration::from_millis(1)], Duration::from_millis(1));
        let b = bandwidth(1000, &[Duration::from_millis(2)], Duration::from_millis(2));
        let t = sum([&a, &b].into_iter());
        assert!((t.avg_gbps - (a.avg_gbps + b.avg_gbps)).abs() < 1e-12);
        assert!((t.msg_rate_mpps - (a.msg_rate_mpps + b.msg_rate_mpps)).abs() < 1e-12);
        assert!((t.peak_mbytes_per_s - (a.peak_mbytes_per_s + b.peak_mbytes_per_s)).abs() < 1e-9);
    }
}
