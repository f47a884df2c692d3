//! Confidence intervals of a mean from a handful of paired rounds (Student's t, 95 %).

/// Two-sided 95 % quantiles of Student's t for 1 to 30 degrees of freedom.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
    2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/// A mean and the half-width of its 95 % confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Estimate {
    pub(crate) mean: f64,
    pub(crate) half_width: f64,
    pub(crate) n: usize,
}

impl Estimate {
    /// `None` for fewer than two values.
    pub(crate) fn of(values: &[f64]) -> Option<Self> {
        let n = values.len();
        if n < 2 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let t = T95.get(n - 2).copied().unwrap_or(1.960);
        Some(Self { mean, half_width: t * (var / n as f64).sqrt(), n })
    }

    /// Half-width relative to the mean (0.02 is ±2 %).
    pub(crate) fn relative(&self) -> f64 {
        if self.mean == 0.0 {
            f64::INFINITY
        } else {
            self.half_width / self.mean.abs()
        }
    }
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} ± {:.3} (95 % CI, n={})", self.mean, self.half_width, self.n)
    }
}
