//! The learning-rate schedule (SPEC §5): linear warmup over a fraction of all steps, then
//! cosine decay from the peak to peak × min_lr_frac at the last step.

#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub peak: f64,
    pub min: f64,
    pub warmup: u64,
    pub total: u64,
}

impl Schedule {
    pub fn new(peak: f64, min_lr_frac: f64, warmup_frac: f64, total: u64) -> Schedule {
        Schedule {
            peak,
            min: peak * min_lr_frac,
            warmup: (warmup_frac * total as f64).round() as u64,
            total,
        }
    }

    /// The learning rate of the update at optimizer step `step` (0-based).
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup {
            return self.peak * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let progress = ((step - self.warmup) as f64 / span).min(1.0);
        self.min + 0.5 * (self.peak - self.min) * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine_to_a_tenth() {
        let s = Schedule::new(1.0, 0.1, 0.2, 10);
        assert_eq!(s.warmup, 2);
        assert_eq!(s.lr(0), 0.5);
        assert_eq!(s.lr(1), 1.0);
        assert_eq!(s.lr(2), 1.0, "cosine starts at the peak");
        assert!((s.lr(6) - 0.55).abs() < 1e-12, "half way: (1 + 0.1) / 2");
        assert!((s.lr(10) - 0.1).abs() < 1e-12);
    }
}
