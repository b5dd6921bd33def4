//! A deterministic random source and the distributions the simulator draws
//! from.
//!
//! Invariant: everything random in a run comes from one `Rng` seeded by the
//! scenario, drawn in event order, so the same seed gives the same run.

/// SplitMix64: small, fast, and good enough for workload generation.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// A uniform `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// An exponential variate with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// A standard normal variate (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// The z-score of the 99th percentile of a standard normal distribution.
const Z99: f64 = 2.326_347_874;

/// How long a job takes, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub enum Durations {
    /// Always the same.
    Fixed(f64),
    /// Exponential with this mean.
    Exponential {
        /// Mean seconds.
        mean: f64,
    },
    /// Log-normal, given by its median and 99th percentile.
    LogNormal {
        /// Median seconds.
        median: f64,
        /// 99th-percentile seconds (at least the median).
        p99: f64,
    },
    /// Drawn uniformly from measured durations.
    Empirical(Vec<f64>),
}

impl Durations {
    /// One draw, in seconds (never negative).
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        let x = match self {
            Durations::Fixed(s) => *s,
            Durations::Exponential { mean } => rng.exponential(*mean),
            Durations::LogNormal { median, p99 } => {
                let sigma = (p99 / median).ln().max(0.0) / Z99;
                median * (sigma * rng.normal()).exp()
            }
            Durations::Empirical(values) => {
                if values.is_empty() {
                    0.0
                } else {
                    values[(rng.next_u64() % values.len() as u64) as usize]
                }
            }
        };
        x.max(0.0)
    }

    /// The distribution's p-th percentile (0..100), exact for the parametric
    /// ones and by sorting for empirical data.
    pub fn percentile(&self, p: f64) -> f64 {
        let q = (p / 100.0).clamp(0.0, 1.0);
        match self {
            Durations::Fixed(s) => *s,
            Durations::Exponential { mean } => -mean * (1.0 - q).max(f64::MIN_POSITIVE).ln(),
            Durations::LogNormal { median, p99 } => {
                let sigma = (p99 / median).ln().max(0.0) / Z99;
                median * (sigma * probit(q)).exp()
            }
            Durations::Empirical(values) => {
                if values.is_empty() {
                    return 0.0;
                }
                let mut sorted = values.clone();
                sorted.sort_by(f64::total_cmp);
                let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
                sorted[rank - 1]
            }
        }
    }

    /// Parses `fixed:S`, `exp:MEAN`, `lognormal:MEDIAN:P99` or `file:PATH`
    /// (one duration in seconds per line).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.split(':');
        let kind = parts.next().unwrap_or_default();
        let number = |s: Option<&str>| -> Result<f64, String> {
            let s = s.ok_or_else(|| format!("'{text}': missing a number"))?;
            let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
            if v.is_finite() && v >= 0.0 { Ok(v) } else { Err(format!("'{s}' must be a finite number >= 0")) }
        };
        let parsed = match kind {
            "fixed" => Durations::Fixed(number(parts.next())?),
            "exp" => Durations::Exponential { mean: number(parts.next())? },
            "lognormal" => {
                let median = number(parts.next())?;
                let p99 = number(parts.next())?;
                if median <= 0.0 || p99 < median {
                    return Err("lognormal needs 0 < median <= p99".into());
                }
                Durations::LogNormal { median, p99 }
            }
            "file" => {
                let path: Vec<&str> = parts.collect();
                let path = path.join(":");
                let body = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
                let mut values = Vec::new();
                for (n, line) in body.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    values.push(number(Some(line)).map_err(|e| format!("{path}:{}: {e}", n + 1))?);
                }
                if values.is_empty() {
                    return Err(format!("{path}: no durations"));
                }
                return Ok(Durations::Empirical(values));
            }
            _ => {
                return Err(format!(
                    "unknown distribution '{text}': use fixed:S, exp:MEAN, lognormal:MEDIAN:P99 or file:PATH"
                ));
            }
        };
        if parts.next().is_some() {
            return Err(format!("'{text}': too many fields"));
        }
        Ok(parsed)
    }
}

/// The standard normal quantile function (Acklam's rational approximation,
/// relative error below 1.2e-9).
fn probit(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.38357751867269e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] =
        [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }

    #[test]
    fn lognormal_matches_its_median_and_p99() {
        let d = Durations::LogNormal { median: 10.0, p99: 300.0 };
        let mut rng = Rng::new(1);
        let mut xs: Vec<f64> = (0..200_000).map(|_| d.sample(&mut rng)).collect();
        xs.sort_by(f64::total_cmp);
        let median = xs[xs.len() / 2];
        let p99 = xs[xs.len() * 99 / 100];
        assert!((median / 10.0 - 1.0).abs() < 0.03, "median {median}");
        assert!((p99 / 300.0 - 1.0).abs() < 0.06, "p99 {p99}");
        assert!((d.percentile(99.0) / 300.0 - 1.0).abs() < 1e-6);
        assert!((d.percentile(50.0) / 10.0 - 1.0).abs() < 1e-6);
    }

    #[test]
    fn exponential_mean() {
        let mut rng = Rng::new(3);
        let n = 200_000;
        let mean: f64 = (0..n).map(|_| rng.exponential(2.0)).sum::<f64>() / n as f64;
        assert!((mean - 2.0).abs() < 0.03, "{mean}");
    }

    #[test]
    fn parse_accepts_each_form_and_refuses_bad_input() {
        assert_eq!(Durations::parse("fixed:3").unwrap(), Durations::Fixed(3.0));
        assert_eq!(Durations::parse("exp:2.5").unwrap(), Durations::Exponential { mean: 2.5 });
        assert_eq!(Durations::parse("lognormal:5:60").unwrap(), Durations::LogNormal { median: 5.0, p99: 60.0 });
        for bad in ["", "fixed", "fixed:-1", "fixed:x", "lognormal:10:5", "gamma:1", "fixed:1:2", "file:/nonexistent"] {
            assert!(Durations::parse(bad).is_err(), "{bad}");
        }
        let path = std::env::temp_dir().join(format!("leaseq-sim-durations-{}.txt", std::process::id()));
        std::fs::write(&path, "# seconds\n1.5\n\n2.5\n").unwrap();
        let parsed = Durations::parse(&format!("file:{}", path.display())).unwrap();
        assert_eq!(parsed, Durations::Empirical(vec![1.5, 2.5]));
        assert_eq!(parsed.percentile(50.0), 1.5);
        std::fs::remove_file(path).unwrap();
    }
}
