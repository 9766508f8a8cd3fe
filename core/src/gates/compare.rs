//! The comparison ("baseline") gate: one sample window of a metric in the regions already
//! updated (the *canary*) judged against the same metric in the regions not yet updated
//! (the *baseline*), after Netflix Kayenta's Mann-Whitney judge.
//!
//! The judgement of [`compare`]:
//!
//! 1. Points that are not finite (NaN, +inf, -inf: e.g. a 0/0 rate over a window without
//!    traffic) are dropped on both sides; -0 counts as 0.
//! 2. If either side has fewer than `max(min_samples, 1)` points left, the verdict is
//!    **Inconclusive**, never Successful, and the explanation names the side and the counts.
//! 3. The test is Mann-Whitney U. The pooled points are ranked, tied points sharing the mean
//!    of their ranks (midranks), and the canary's statistic is U_c = R_c − n_c(n_c+1)/2,
//!    R_c being the sum of the canary's ranks (equivalently: the number of (canary, baseline)
//!    pairs in which the canary point is higher, plus half the number of tied pairs). With
//!    N = n_c + n_b, U_b = n_c·n_b − U_c, and t running over the sizes of the groups of
//!    tied points, the normal approximation has mean μ = n_c·n_b/2 and variance
//!    σ² = n_c·n_b/12 · ((N+1) − Σ(t³−t)/(N(N−1))). With a continuity correction of 0.5
//!    and Φ the standard normal distribution function:
//!    - Increase (alternative: the canary is stochastically greater):
//!      p = 1 − Φ((U_c − μ − 0.5)/σ);
//!    - Decrease (alternative: the canary is stochastically smaller):
//!      p = 1 − Φ((U_b − μ − 0.5)/σ);
//!    - Either (two-sided): p = min(1, 2·(1 − Φ((max(U_c, U_b) − μ − 0.5)/σ))), twice the
//!      one-sided p of the side observed.
//!
//!    These are the p-values of scipy's `mannwhitneyu(canary, baseline, alternative=...,
//!    method="asymptotic", use_continuity=True)` and of R's `wilcox.test(canary, baseline,
//!    exact=FALSE, correct=TRUE)`. If every point is equal (σ = 0), p = 1. Φ is computed
//!    from an approximation of erfc with a relative error below 1.2e-7.
//! 4. The change is the relative change of the medians, (m_c − m_b)/|m_b|; +inf or -inf
//!    when m_b = 0 and m_c ≠ 0, and 0 when both are 0. The verdict is **Failed** if and
//!    only if p < alpha and the change is beyond the tolerance in a failing direction:
//!    change > tolerance for Increase, change < −tolerance for Decrease, |change| >
//!    tolerance for Either. Otherwise it is **Successful**: either there is no significant
//!    difference, or there is one but within the tolerance, and the explanation says which.
//! 5. Points are sorted with `f64::total_cmp`. Medians and interquartile ranges are
//!    quantiles by linear interpolation between the sorted points (Hyndman and Fan's type 7,
//!    numpy's default), so the median of an even count is the mean of the two middle
//!    points. The cost is O(N log N) in the number of points.
//! 6. Rules out of range do not panic: a NaN or negative tolerance counts as 0, and alpha
//!    is clamped into (0, 1) (at most 0 becomes the smallest positive number, at least 1
//!    the largest number below 1, NaN the conventional 0.05). Specs are validated
//!    separately, before any sample is taken.
//!
//! Pure: no IO and no clock, so that every rule is tested synchronously.

use super::verdict::Verdict;

/// The longest explanation, in bytes: it goes into a status condition's message.
const MAX_EXPLANATION: usize = 300;

/// The level used when a rule's alpha is NaN: the conventional one, since a NaN says
/// nothing about which the author meant.
const DEFAULT_ALPHA: f64 = 0.05;

/// Which change of the canary against the baseline fails the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Fail when the canary is significantly higher (errors, latency).
    Increase,
    /// Fail when the canary is significantly lower (throughput, success ratio).
    Decrease,
    /// Fail when the canary is significantly higher or lower.
    Either,
}

/// How one comparison is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Which change fails the gate.
    pub direction: Direction,
    /// Relative change of the canary's median against the baseline's tolerated, e.g. 0.2
    /// for 20 %.
    pub tolerance: f64,
    /// Significance level, e.g. 0.05 (confidence 95 %).
    pub alpha: f64,
    /// Fewest finite points each side needs; fewer is Inconclusive (never a pass).
    pub min_samples: usize,
}

/// One side's summary (metrics, never configuration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Side {
    /// The number of finite points.
    pub points: usize,
    /// The median of the finite points.
    pub median: f64,
    /// The interquartile range of the finite points.
    pub spread: f64,
}

/// The judgement of one sample window.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Successful, Failed or Inconclusive.
    pub verdict: Verdict,
    /// The canary's summary; `None` when it has no finite point.
    pub canary: Option<Side>,
    /// The baseline's summary; `None` when it has no finite point.
    pub baseline: Option<Side>,
    /// Mann-Whitney U of the canary; `None` when not computed (too few points).
    pub statistic: Option<f64>,
    /// The p-value for the rules' direction (one-sided for Increase and Decrease,
    /// two-sided for Either); `None` when not computed.
    pub p_value: Option<f64>,
    /// Relative change of the canary's median against the baseline's: (c − b)/|b|;
    /// +inf or -inf when b = 0 and c ≠ 0; 0 when both are 0. `None` when not computed.
    pub change: Option<f64>,
    /// Why, in words a platform engineer can act on, at most 300 bytes.
    pub explanation: String,
}

/// Judges the canary's points against the baseline's; see the module documentation.
pub fn compare(canary: &[f64], baseline: &[f64], rules: &Rules) -> Comparison {
    let canary_points = finite_sorted(canary);
    let baseline_points = finite_sorted(baseline);
    let canary_side = summarize(&canary_points);
    let baseline_side = summarize(&baseline_points);
    let inconclusive = |explanation: String| Comparison {
        verdict: Verdict::Inconclusive,
        canary: canary_side,
        baseline: baseline_side,
        statistic: None,
        p_value: None,
        change: None,
        explanation: bounded(explanation),
    };

    // Zero points can never be judged, so `min_samples: 0` still needs one on each side.
    let needed = rules.min_samples.max(1);
    let short = [
        ("canary", canary.len(), canary_points.len()),
        ("baseline", baseline.len(), baseline_points.len()),
    ]
    .into_iter()
    .filter(|(_, _, finite)| *finite < needed)
    .map(|(name, total, finite)| count_of(name, total, finite))
    .collect::<Vec<_>>();
    if !short.is_empty() {
        return inconclusive(format!(
            "{}, fewer than the {needed} needed",
            short.join(" and ")
        ));
    }
    // Both sides have at least one point here, so both summaries exist; the `else` only
    // keeps the function total.
    let (Some(canary_side), Some(baseline_side)) = (canary_side, baseline_side) else {
        return inconclusive("no finite points to compare".to_string());
    };

    let test = MannWhitney::new(&canary_points, &baseline_points);
    let p = test.p_value(rules.direction);
    if p.is_nan() {
        // Unreachable by construction (every term is finite and σ > 0), but a NaN would
        // compare as "not significant" and pass the gate: fail closed instead.
        return inconclusive("the p-value could not be computed".to_string());
    }
    let alpha = effective_alpha(rules.alpha);
    let tolerance = effective_tolerance(rules.tolerance);
    let change = relative_change(canary_side.median, baseline_side.median);
    let significant = p < alpha;
    let beyond = match rules.direction {
        Direction::Increase => change > tolerance,
        Direction::Decrease => change < -tolerance,
        Direction::Either => change.abs() > tolerance,
    };
    let verdict = if significant && beyond {
        Verdict::Failed
    } else {
        Verdict::Successful
    };
    let facts = Facts {
        direction: rules.direction,
        canary: canary_side,
        baseline: baseline_side,
        p,
        alpha,
        tolerance,
        change,
        higher: test.canary_is_higher(),
    };
    let explanation = if !significant {
        facts.not_significant()
    } else if beyond {
        facts.beyond_tolerance()
    } else {
        facts.within_tolerance()
    };
    Comparison {
        verdict,
        canary: Some(canary_side),
        baseline: Some(baseline_side),
        statistic: Some(test.u_canary),
        p_value: Some(p),
        change: Some(change),
        explanation: bounded(explanation),
    }
}

/// The finite points, sorted. -0 becomes +0 because `total_cmp` orders -0 before +0,
/// which would split one group of tied zeros in two.
fn finite_sorted(points: &[f64]) -> Vec<f64> {
    let mut finite: Vec<f64> = points
        .iter()
        .copied()
        .filter(|point| point.is_finite())
        .map(|point| if point == 0.0 { 0.0 } else { point })
        .collect();
    finite.sort_unstable_by(f64::total_cmp);
    finite
}

fn summarize(sorted: &[f64]) -> Option<Side> {
    let median = quantile(sorted, 0.5)?;
    let lower = quantile(sorted, 0.25)?;
    let upper = quantile(sorted, 0.75)?;
    Some(Side {
        points: sorted.len(),
        median,
        // Overflows to +inf only when the quartiles are more than f64::MAX apart, which is
        // the honest answer then.
        spread: upper - lower,
    })
}

/// The type 7 quantile `q` (in [0, 1]) of sorted, finite points; `None` when empty.
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    // Exact for any slice that fits in memory (fewer than 2^53 points).
    let position = last as f64 * q;
    let below = position.floor();
    let fraction = position - below;
    // `as` saturates, and `get` bounds the index anyway.
    let low = *sorted.get(below as usize)?;
    let high = sorted.get(position.ceil() as usize).copied().unwrap_or(low);
    Some(interpolate(low, high, fraction))
}

/// low + (high − low)·t, with t in [0, 1], low ≤ high, both finite, without overflow.
fn interpolate(low: f64, high: f64, t: f64) -> f64 {
    // Equal points (and t = 0) give the point itself exactly: a median of tied points
    // must equal them, not differ in the last bit.
    if low == high || t == 0.0 {
        return low;
    }
    let width = high - low;
    let value = if width.is_finite() {
        low + width * t
    } else {
        // Points more than f64::MAX apart: weigh them separately so nothing overflows.
        low * (1.0 - t) + high * t
    };
    // Rounding must not take the result outside the two points.
    value.clamp(low, high)
}

/// (c − b)/|b|; ±inf when b = 0 and c ≠ 0; 0 when both are 0.
fn relative_change(canary: f64, baseline: f64) -> f64 {
    if baseline == 0.0 {
        return if canary > 0.0 {
            f64::INFINITY
        } else if canary < 0.0 {
            f64::NEG_INFINITY
        } else {
            0.0
        };
    }
    let difference = canary - baseline;
    if difference.is_finite() {
        // The exact difference first: precise when the medians are close, which is where
        // the tolerance is decided.
        difference / baseline.abs()
    } else {
        // Medians of opposite signs more than f64::MAX apart: c/|b| − sign(b) is the same
        // value without the overflowing difference.
        canary / baseline.abs() - baseline.signum()
    }
}

fn effective_alpha(alpha: f64) -> f64 {
    if alpha.is_nan() {
        DEFAULT_ALPHA
    } else {
        alpha.clamp(f64::MIN_POSITIVE, 1.0_f64.next_down())
    }
}

fn effective_tolerance(tolerance: f64) -> f64 {
    // A negative tolerance would fail a canary that improved: treat it, like NaN, as none.
    if tolerance > 0.0 { tolerance } else { 0.0 }
}

/// The Mann-Whitney U of the canary and its normal approximation under the null
/// hypothesis.
struct MannWhitney {
    u_canary: f64,
    /// n_c·n_b.
    pairs: f64,
    /// μ = n_c·n_b/2.
    mean: f64,
    /// σ, 0 when every point is equal.
    deviation: f64,
}

impl MannWhitney {
    /// Both slices sorted by `total_cmp`, finite, without -0 (see [`finite_sorted`]).
    fn new(canary: &[f64], baseline: &[f64]) -> MannWhitney {
        // U is counted group by group of equal values while merging the two sorted sides:
        // each canary point of a group is above every baseline point of earlier groups and
        // tied with the baseline points of its own group. That is R_c − n_c(n_c+1)/2
        // without the large rank sums, and it is exact (a sum of halves) in f64.
        let mut canary_rest = canary;
        let mut baseline_rest = baseline;
        let mut u_canary = 0.0;
        let mut baseline_below = 0.0;
        let mut tie_sum = 0.0;
        let mut groups_seen = 0_u8;
        loop {
            let value = match (canary_rest.first(), baseline_rest.first()) {
                (Some(c), Some(b)) => c.min(*b),
                (Some(c), None) => *c,
                (None, Some(b)) => *b,
                (None, None) => break,
            };
            // `value` is the head of one side, so each turn consumes at least one point.
            let in_canary = canary_rest.iter().take_while(|x| **x == value).count();
            let in_baseline = baseline_rest.iter().take_while(|x| **x == value).count();
            canary_rest = canary_rest.get(in_canary..).unwrap_or_default();
            baseline_rest = baseline_rest.get(in_baseline..).unwrap_or_default();
            let (c, b) = (in_canary as f64, in_baseline as f64);
            u_canary += c * (baseline_below + 0.5 * b);
            baseline_below += b;
            let t = c + b;
            tie_sum += (t - 1.0) * t * (t + 1.0);
            groups_seen = groups_seen.saturating_add(1);
        }
        let (n_c, n_b) = (canary.len() as f64, baseline.len() as f64);
        let n = n_c + n_b;
        let pairs = n_c * n_b;
        let variance = pairs / 12.0 * ((n + 1.0) - tie_sum / (n * (n - 1.0)));
        // One group means every point is equal: the variance is 0 in exact arithmetic,
        // and rounding must not turn it into a tiny positive σ and a spurious z.
        let deviation = if groups_seen > 1 && variance > 0.0 {
            variance.sqrt()
        } else {
            0.0
        };
        MannWhitney {
            u_canary,
            pairs,
            mean: pairs / 2.0,
            deviation,
        }
    }

    fn u_baseline(&self) -> f64 {
        self.pairs - self.u_canary
    }

    fn canary_is_higher(&self) -> bool {
        self.u_canary > self.mean
    }

    fn p_value(&self, direction: Direction) -> f64 {
        if self.deviation <= 0.0 {
            return 1.0;
        }
        // P(U ≥ u) of a discrete statistic: the continuity correction always takes 0.5
        // off, as scipy and R do (toward the mean whenever u is on the tested side, the
        // only case in which p can be small).
        let upper_tail = |u: f64| normal_sf((u - self.mean - 0.5) / self.deviation);
        let p = match direction {
            Direction::Increase => upper_tail(self.u_canary),
            Direction::Decrease => upper_tail(self.u_baseline()),
            Direction::Either => 2.0 * upper_tail(self.u_canary.max(self.u_baseline())),
        };
        p.clamp(0.0, 1.0)
    }
}

/// 1 − Φ(z), the standard normal upper tail.
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// Φ(z), the standard normal distribution function.
#[cfg(test)]
fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// The complementary error function, by the Chebyshev fit of Numerical Recipes (`erfcc`):
/// relative error below 1.2e-7 everywhere, also far in the tails where small p-values
/// live. At ±inf it gives 0 and 2, never NaN.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let polynomial = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let value = t * (-z * z + polynomial).exp();
    if x >= 0.0 { value } else { 2.0 - value }
}

/// What an explanation of a judged comparison says.
struct Facts {
    direction: Direction,
    canary: Side,
    baseline: Side,
    p: f64,
    alpha: f64,
    tolerance: f64,
    change: f64,
    higher: bool,
}

impl Facts {
    fn not_significant(&self) -> String {
        let what = match self.direction {
            Direction::Increase => "not significantly higher",
            Direction::Decrease => "not significantly lower",
            Direction::Either => "no significant difference",
        };
        format!(
            "{what}: p={} >= {} (canary median {}, baseline {})",
            p_value(self.p),
            number(self.alpha),
            number(self.canary.median),
            number(self.baseline.median),
        )
    }

    fn beyond_tolerance(&self) -> String {
        let medians = if self.baseline.median == 0.0 {
            let way = if self.change > 0.0 { "up" } else { "down" };
            format!(
                "canary median {} is {way} from a baseline median of 0",
                number(self.canary.median)
            )
        } else {
            format!(
                "canary median {} is {} against the baseline's {}",
                number(self.canary.median),
                percent(self.change),
                number(self.baseline.median),
            )
        };
        format!(
            "{medians} ({} and {} points); Mann-Whitney p={} < {}: significantly {}, beyond the {}% tolerated",
            self.canary.points,
            self.baseline.points,
            p_value(self.p),
            number(self.alpha),
            self.way(),
            number(self.tolerance * 100.0),
        )
    }

    fn within_tolerance(&self) -> String {
        let tolerance = number(self.tolerance * 100.0);
        let change = percent(self.change);
        let bound = match self.direction {
            Direction::Increase => format!("{change} <= {tolerance}%"),
            Direction::Decrease => format!("{change} >= -{tolerance}%"),
            Direction::Either => format!("|{change}| <= {tolerance}%"),
        };
        format!(
            "significantly {} but within tolerance: {bound} (canary median {}, baseline {}; p={} < {})",
            self.way(),
            number(self.canary.median),
            number(self.baseline.median),
            p_value(self.p),
            number(self.alpha),
        )
    }

    /// Which way the significant difference goes. For the one-sided tests it is the
    /// tested side; for Either it is the side of the ranks, unless the medians moved the
    /// other way (possible with skewed samples), where "different" is all that is true.
    fn way(&self) -> &'static str {
        match self.direction {
            Direction::Increase => "higher",
            Direction::Decrease => "lower",
            Direction::Either if self.higher && self.change >= 0.0 => "higher",
            Direction::Either if !self.higher && self.change <= 0.0 => "lower",
            Direction::Either => "different",
        }
    }
}

/// "canary has 3 points" or "baseline has 3 points (2 NaN or infinite dropped)".
fn count_of(name: &str, total: usize, finite: usize) -> String {
    let dropped = total.saturating_sub(finite);
    if dropped == 0 {
        format!("{name} has {finite} points")
    } else {
        format!("{name} has {finite} points ({dropped} NaN or infinite dropped)")
    }
}

/// A number as explanations and statuses show it: up to 4 significant digits, fixed
/// notation from 1e-4 to 1e6, scientific outside ("3.2e-9"), without trailing zeros;
/// "inf", "-inf" and "NaN" as such.
pub fn number(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if x == 0.0 {
        return "0".to_string();
    }
    let magnitude = x.abs();
    if (1e-4..1e6).contains(&magnitude) {
        // 4 significant digits: 3 decimals at [1, 10), one more per decade below; the
        // exponent is in [-4, 5], so this is in [0, 7].
        let decimals = (3.0 - magnitude.log10().floor()).clamp(0.0, 7.0) as usize;
        trim_zeros(&format!("{x:.decimals$}")).to_string()
    } else {
        let scientific = format!("{x:.3e}");
        match scientific.split_once('e') {
            Some((mantissa, exponent)) => format!("{}e{exponent}", trim_zeros(mantissa)),
            None => scientific,
        }
    }
}

fn trim_zeros(fixed: &str) -> &str {
    if fixed.contains('.') {
        fixed.trim_end_matches('0').trim_end_matches('.')
    } else {
        fixed
    }
}

/// A p-value as explanations show it after "p=": "0.0001", "3.2e-9" (see [`number`]).
pub fn p_value(p: f64) -> String {
    number(p)
}

/// A relative change as a signed percentage: "+2400%", "-12%", "0%".
pub fn percent(change: f64) -> String {
    let value = change * 100.0;
    if value > 0.0 {
        format!("+{}%", number(value))
    } else {
        format!("{}%", number(value))
    }
}

/// At most [`MAX_EXPLANATION`] bytes, cut at a character boundary. The texts above stay
/// well under it (every number is at most 10 characters); this only keeps the bound a
/// guarantee.
fn bounded(mut explanation: String) -> String {
    if explanation.len() > MAX_EXPLANATION {
        let mut cut = MAX_EXPLANATION;
        while !explanation.is_char_boundary(cut) {
            cut = cut.saturating_sub(1);
        }
        explanation.truncate(cut);
    }
    explanation
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn rules(direction: Direction) -> Rules {
        Rules {
            direction,
            tolerance: 0.2,
            alpha: 0.05,
            min_samples: 10,
        }
    }

    /// A small linear congruential generator (Numerical Recipes' constants): the same
    /// seed gives the same sequence on every platform, with no dependency.
    struct Lcg(u32);

    impl Lcg {
        /// Uniform in [0, 1).
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            f64::from(self.0) / 4_294_967_296.0
        }

        /// `count` points uniform in [low, high).
        fn draw(&mut self, count: usize, low: f64, high: f64) -> Vec<f64> {
            (0..count)
                .map(|_| low + (high - low) * self.next())
                .collect()
        }
    }

    #[test]
    fn the_normal_distribution_matches_known_values() {
        assert!((normal_cdf(1.96) - 0.975_002_1).abs() < 1e-6);
        assert!((normal_cdf(-3.0) - 0.001_349_898).abs() < 1e-8);
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        // The relative error holds in the far tail, where small p-values are decided:
        // 1 − Φ(6) = 9.865876450377e-10.
        assert!((normal_sf(6.0) / 9.865_876_450_377e-10 - 1.0).abs() < 2e-7);
        assert_eq!(normal_sf(f64::INFINITY), 0.0);
        assert_eq!(normal_sf(f64::NEG_INFINITY), 1.0);
    }

    #[test]
    fn quantiles_interpolate_like_numpy() {
        // numpy.percentile([1, 2, 3, 4], [25, 50, 75]) = [1.75, 2.5, 3.25].
        let side = summarize(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            side,
            Some(Side {
                points: 4,
                median: 2.5,
                spread: 1.5
            })
        );
        // Odd count: the middle point; numpy.percentile([1, 2, 10], [25, 75]) = [1.5, 6].
        let side = summarize(&[1.0, 2.0, 10.0]);
        assert_eq!(
            side,
            Some(Side {
                points: 3,
                median: 2.0,
                spread: 4.5
            })
        );
        assert_eq!(summarize(&[]), None);
        // Extreme points do not overflow the median.
        let side = summarize(&[-f64::MAX, f64::MAX]);
        assert_eq!(side.map(|s| s.median), Some(0.0));
    }

    #[test]
    fn identical_distributions_pass() {
        let baseline = Lcg(7).draw(60, 90.0, 110.0);
        let mut shuffled = baseline.clone();
        shuffled.reverse();
        shuffled.rotate_left(17);
        for direction in [Direction::Increase, Direction::Decrease, Direction::Either] {
            let result = compare(&shuffled, &baseline, &rules(direction));
            assert_eq!(result.verdict, Verdict::Successful, "{direction:?}");
            // Every canary point ties with one baseline point: U is exactly the mean.
            assert_eq!(result.statistic, Some(60.0 * 60.0 / 2.0));
            assert_eq!(result.change, Some(0.0));
        }
        let either = compare(&shuffled, &baseline, &rules(Direction::Either));
        assert_eq!(either.p_value, Some(1.0));
        assert!(
            either
                .explanation
                .starts_with("no significant difference: p=1 >= 0.05"),
            "{}",
            either.explanation
        );

        // Two draws of one pseudo-random sequence: same distribution, different points.
        let mut generator = Lcg(42);
        let canary = generator.draw(200, 90.0, 110.0);
        let baseline = generator.draw(200, 90.0, 110.0);
        for direction in [Direction::Increase, Direction::Decrease, Direction::Either] {
            let result = compare(&canary, &baseline, &rules(direction));
            assert_eq!(
                result.verdict,
                Verdict::Successful,
                "{direction:?}: {result:?}"
            );
            let p = result.p_value.unwrap_or(0.0);
            assert!(p > 0.05, "{direction:?}: p={p}");
        }
    }

    #[test]
    fn a_higher_canary_fails_increase_and_either_but_not_decrease() {
        let canary = vec![0.25; 20];
        let baseline = vec![0.01; 20];

        let increase = compare(&canary, &baseline, &rules(Direction::Increase));
        assert_eq!(increase.verdict, Verdict::Failed);
        // Every pair has the canary higher: U = 20·20 = 400. μ = 200; two tie groups of
        // 20: Σ(t³−t) = 15960, N(N−1) = 1560, σ² = 400/12·(41 − 15960/1560) = 1025.641;
        // z = (400 − 200 − 0.5)/32.0256 = 6.2294, p = 2.3413e-10 (formula in Python's
        // math.erfc).
        assert_eq!(increase.statistic, Some(400.0));
        let p = increase.p_value.unwrap_or(1.0);
        assert!((p / 2.341_341_179_371e-10 - 1.0).abs() < 1e-6, "p={p}");
        assert_eq!(increase.change.map(|c| (c - 24.0).abs() < 1e-9), Some(true));
        assert_eq!(
            increase.explanation,
            "canary median 0.25 is +2400% against the baseline's 0.01 (20 and 20 points); \
             Mann-Whitney p=2.341e-10 < 0.05: significantly higher, beyond the 20% tolerated"
        );

        let decrease = compare(&canary, &baseline, &rules(Direction::Decrease));
        assert_eq!(decrease.verdict, Verdict::Successful);
        assert!(decrease.p_value.unwrap_or(0.0) > 0.99);
        assert!(
            decrease
                .explanation
                .starts_with("not significantly lower: p=1 >= 0.05"),
            "{}",
            decrease.explanation
        );

        let either = compare(&canary, &baseline, &rules(Direction::Either));
        assert_eq!(either.verdict, Verdict::Failed);
        let p = either.p_value.unwrap_or(1.0);
        assert!((p / 4.682_682_358_742e-10 - 1.0).abs() < 1e-6, "p={p}");
        assert!(either.explanation.contains("significantly higher, beyond"));
    }

    #[test]
    fn a_shift_beyond_the_tolerance_fails_and_one_within_passes() {
        let mut generator = Lcg(3);
        let baseline = generator.draw(50, 95.0, 105.0);
        let noise = generator.draw(50, 95.0, 105.0);

        let up_half: Vec<f64> = noise.iter().map(|x| x * 1.5).collect();
        let result = compare(&up_half, &baseline, &rules(Direction::Increase));
        assert_eq!(result.verdict, Verdict::Failed, "{result:?}");
        assert!(result.explanation.contains("beyond the 20% tolerated"));

        let up_tenth: Vec<f64> = noise.iter().map(|x| x * 1.1).collect();
        let result = compare(&up_tenth, &baseline, &rules(Direction::Increase));
        assert_eq!(result.verdict, Verdict::Successful, "{result:?}");
        // Significant, yet within the tolerance.
        assert!(result.p_value.unwrap_or(1.0) < 1e-6);
        let change = result.change.unwrap_or(f64::NAN);
        assert!(change > 0.05 && change < 0.15, "change {change}");
        assert!(
            result
                .explanation
                .starts_with("significantly higher but within tolerance: +"),
            "{}",
            result.explanation
        );
        assert!(
            result.explanation.contains("% <= 20%"),
            "{}",
            result.explanation
        );

        // The same tenth downward, judged for a decrease: within tolerance as well.
        let down_tenth: Vec<f64> = noise.iter().map(|x| x * 0.9).collect();
        let result = compare(&down_tenth, &baseline, &rules(Direction::Decrease));
        assert_eq!(result.verdict, Verdict::Successful);
        assert!(
            result.explanation.contains("% >= -20%"),
            "{}",
            result.explanation
        );
        let down_half: Vec<f64> = noise.iter().map(|x| x * 0.5).collect();
        let result = compare(&down_half, &baseline, &rules(Direction::Decrease));
        assert_eq!(result.verdict, Verdict::Failed);
        assert!(result.explanation.contains("significantly lower, beyond"));
    }

    #[test]
    fn all_points_tied_give_p_one() {
        for value in [0.0, -0.0, 3.5] {
            for direction in [Direction::Increase, Direction::Decrease, Direction::Either] {
                let result = compare(&[value; 15], &[value; 25], &rules(direction));
                assert_eq!(result.verdict, Verdict::Successful);
                assert_eq!(result.p_value, Some(1.0));
                assert_eq!(result.change, Some(0.0));
            }
        }
        // -0 and +0 are one tied group.
        let result = compare(&[-0.0; 12], &[0.0; 12], &rules(Direction::Either));
        assert_eq!(result.p_value, Some(1.0));
        assert_eq!(result.statistic, Some(72.0));
    }

    #[test]
    fn too_few_points_are_inconclusive() {
        let plenty = vec![1.0; 10];
        let few = vec![1.0; 3];
        let result = compare(&plenty, &few, &rules(Direction::Increase));
        assert_eq!(result.verdict, Verdict::Inconclusive);
        assert_eq!(
            result.explanation,
            "baseline has 3 points, fewer than the 10 needed"
        );
        assert_eq!(result.statistic, None);
        assert_eq!(result.p_value, None);
        assert_eq!(result.baseline.map(|side| side.points), Some(3));

        let result = compare(&few, &plenty, &rules(Direction::Increase));
        assert_eq!(result.verdict, Verdict::Inconclusive);
        assert_eq!(
            result.explanation,
            "canary has 3 points, fewer than the 10 needed"
        );

        // NaN and infinite points do not count: 10 values, 4 of them finite.
        let mut gappy = vec![f64::NAN; 4];
        gappy.extend([f64::INFINITY, f64::NEG_INFINITY]);
        gappy.extend([1.0, 2.0, 3.0, 4.0]);
        let result = compare(&gappy, &plenty, &rules(Direction::Either));
        assert_eq!(result.verdict, Verdict::Inconclusive);
        assert_eq!(
            result.explanation,
            "canary has 4 points (6 NaN or infinite dropped), fewer than the 10 needed"
        );

        let result = compare(&[f64::NAN; 30], &[], &rules(Direction::Either));
        assert_eq!(result.verdict, Verdict::Inconclusive);
        assert_eq!(result.canary, None);
        assert_eq!(result.baseline, None);
        assert_eq!(
            result.explanation,
            "canary has 0 points (30 NaN or infinite dropped) and baseline has 0 points, \
             fewer than the 10 needed"
        );

        // `min_samples: 0` still needs one point a side.
        let none_needed = Rules {
            min_samples: 0,
            ..rules(Direction::Increase)
        };
        let result = compare(&[], &[1.0], &none_needed);
        assert_eq!(result.verdict, Verdict::Inconclusive);
        assert_eq!(
            result.explanation,
            "canary has 0 points, fewer than the 1 needed"
        );
    }

    #[test]
    fn a_rise_from_a_zero_baseline_fails_with_an_infinite_change() {
        let canary = Lcg(9).draw(30, 0.01, 0.05);
        let mut baseline = vec![0.0; 30];
        baseline.extend([0.001, 0.002]);
        let result = compare(&canary, &baseline, &rules(Direction::Increase));
        assert_eq!(result.verdict, Verdict::Failed);
        assert_eq!(result.change, Some(f64::INFINITY));
        assert!(
            result
                .explanation
                .contains("is up from a baseline median of 0 (30 and 32 points)"),
            "{}",
            result.explanation
        );
    }

    #[test]
    fn a_worked_example_matches_the_formula() {
        // Canary 3, 4, 2, 6, 2, 5 against baseline 9, 7, 5, 10, 6, 8 (n_c = n_b = 6).
        // Pooled and sorted: 2 2 3 4 5 5 6 6 7 8 9 10, midranks 1.5 1.5 3 4 5.5 5.5 7.5 7.5
        // 9 10 11 12. The canary's ranks: 2→1.5, 2→1.5, 3→3, 4→4, 5→5.5, 6→7.5, so
        // R_c = 23 and U_c = 23 − 6·7/2 = 2. By pairs: the canary's 5 ties the baseline's
        // 5 (0.5); its 6 is above the baseline's 5 (1) and ties its 6 (0.5); no other
        // canary point reaches a baseline point: 0.5 + 1 + 0.5 = 2.
        // μ = 18; ties: three groups of 2, Σ(t³−t) = 18, N(N−1) = 132;
        // σ² = 36/12·(13 − 18/132) = 38.5909, σ = 6.21216.
        // scipy's asymptotic p with continuity (the formula, evaluated with Python's
        // math.erfc): greater 0.99604728, less 0.00629596, two-sided 0.01259191.
        let canary = [3.0, 4.0, 2.0, 6.0, 2.0, 5.0];
        let baseline = [9.0, 7.0, 5.0, 10.0, 6.0, 8.0];
        let cases = [
            (Direction::Increase, 0.996_047_277_746, Verdict::Successful),
            (Direction::Decrease, 0.006_295_955_745, Verdict::Failed),
            (Direction::Either, 0.012_591_911_490, Verdict::Failed),
        ];
        for (direction, expected, verdict) in cases {
            let rules = Rules {
                min_samples: 5,
                ..rules(direction)
            };
            let result = compare(&canary, &baseline, &rules);
            assert_eq!(result.statistic, Some(2.0));
            let p = result.p_value.unwrap_or(f64::NAN);
            assert!((p / expected - 1.0).abs() < 2e-7, "{direction:?}: p={p}");
            assert_eq!(result.verdict, verdict, "{direction:?}");
        }
        // Medians 3.5 and 7.5: -53.33 %.
        let result = compare(&canary, &baseline, &rules(Direction::Either));
        assert_eq!(result.canary.map(|side| side.median), Some(3.5));
        assert_eq!(result.baseline.map(|side| side.median), Some(7.5));
    }

    #[test]
    fn rules_out_of_range_do_not_panic() {
        let canary = vec![0.25; 20];
        let baseline = vec![0.01; 20];
        let odd = Rules {
            direction: Direction::Increase,
            tolerance: f64::NAN,
            alpha: 7.0,
            min_samples: 10,
        };
        assert_eq!(compare(&canary, &baseline, &odd).verdict, Verdict::Failed);
        let never = Rules {
            alpha: -1.0,
            tolerance: -5.0,
            ..odd
        };
        let result = compare(&canary, &baseline, &never);
        assert_eq!(result.verdict, Verdict::Successful);
        assert!(
            result.explanation.contains("p=2.341e-10 >= 2.225e-308"),
            "{}",
            result.explanation
        );
        let nan_alpha = Rules {
            alpha: f64::NAN,
            ..odd
        };
        assert_eq!(
            compare(&canary, &baseline, &nan_alpha).verdict,
            Verdict::Failed
        );
        let infinite_tolerance = Rules {
            tolerance: f64::INFINITY,
            ..odd
        };
        assert_eq!(
            compare(&canary, &baseline, &infinite_tolerance).verdict,
            Verdict::Successful
        );
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(0.0001), "0.0001");
        assert_eq!(number(3.2e-9), "3.2e-9");
        assert_eq!(number(123_456.7), "123457");
        assert_eq!(number(0.011_234_5), "0.01123");
        assert_eq!(number(-1.5e300), "-1.5e300");
        assert_eq!(number(20.000_000_000_000_004), "20");
        assert_eq!(percent(24.0), "+2400%");
        assert_eq!(percent(-0.12), "-12%");
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(f64::INFINITY), "+inf%");
    }

    #[test]
    fn large_windows_are_judged() {
        let mut generator = Lcg(11);
        let canary = generator.draw(5_000, 0.0, 1.0);
        let baseline = generator.draw(5_000, 0.0, 1.0);
        let result = compare(&canary, &baseline, &rules(Direction::Either));
        assert_eq!(result.verdict, Verdict::Successful);
        assert!(result.explanation.len() <= MAX_EXPLANATION);
    }

    fn direction() -> impl Strategy<Value = Direction> {
        prop_oneof![
            Just(Direction::Increase),
            Just(Direction::Decrease),
            Just(Direction::Either),
        ]
    }

    /// Finite points, often tied (small integers) and sometimes extreme.
    fn finite_point() -> impl Strategy<Value = f64> {
        prop_oneof![
            (-5_i32..5).prop_map(f64::from),
            -1e3..1e3_f64,
            prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO,
        ]
    }

    /// Any point at all, NaN and infinities included.
    fn any_point() -> impl Strategy<Value = f64> {
        prop_oneof![
            finite_point(),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            any::<f64>(),
        ]
    }

    proptest! {
        /// (a) The test of an increase of the canary is the test of a decrease of the
        /// baseline: the same p always, and the same verdict when nothing is tolerated.
        /// With a tolerance, verdicts may differ, because the change is relative to the
        /// baseline's median: 2 against 1 is +100 %, 1 against 2 is -50 %.
        #[test]
        fn swapping_sides_and_direction_is_the_same_test(
            canary in prop::collection::vec(finite_point(), 0..40),
            baseline in prop::collection::vec(finite_point(), 0..40),
            alpha in 0.001..0.999_f64,
            tolerance in 0.0..2.0_f64,
            min_samples in 0_usize..8,
        ) {
            let increase = Rules { direction: Direction::Increase, tolerance, alpha, min_samples };
            let decrease = Rules { direction: Direction::Decrease, ..increase };
            let forward = compare(&canary, &baseline, &increase);
            let backward = compare(&baseline, &canary, &decrease);
            prop_assert_eq!(forward.p_value, backward.p_value);
            prop_assert_eq!(
                forward.verdict == Verdict::Inconclusive,
                backward.verdict == Verdict::Inconclusive
            );
            let strict = Rules { tolerance: 0.0, ..increase };
            prop_assert_eq!(
                compare(&canary, &baseline, &strict).verdict,
                compare(&baseline, &canary, &Rules { direction: Direction::Decrease, ..strict })
                    .verdict
            );
        }

        /// (b) The two-sided p is a probability for any finite points.
        #[test]
        fn the_two_sided_p_is_a_probability(
            canary in prop::collection::vec(finite_point(), 1..60),
            baseline in prop::collection::vec(finite_point(), 1..60),
        ) {
            let either = Rules { min_samples: 1, ..rules(Direction::Either) };
            let result = compare(&canary, &baseline, &either);
            let p = result.p_value;
            prop_assert!(p.is_some());
            let p = p.unwrap_or(f64::NAN);
            prop_assert!((0.0..=1.0).contains(&p), "p={}", p);
        }

        /// (c) Moving every canary point up never lowers U.
        #[test]
        fn shifting_the_canary_up_never_lowers_u(
            canary in prop::collection::vec(prop_oneof![(-5_i32..5).prop_map(f64::from), -1e6..1e6_f64], 1..40),
            baseline in prop::collection::vec(prop_oneof![(-5_i32..5).prop_map(f64::from), -1e6..1e6_f64], 1..40),
            shift in prop_oneof![Just(1.0), 1e-9..1e6_f64],
        ) {
            let any_count = Rules { min_samples: 1, ..rules(Direction::Increase) };
            let shifted: Vec<f64> = canary.iter().map(|x| x + shift).collect();
            let before = compare(&canary, &baseline, &any_count).statistic;
            let after = compare(&shifted, &baseline, &any_count).statistic;
            prop_assert!(before.is_some() && after.is_some());
            prop_assert!(after >= before, "{:?} then {:?}", before, after);
        }

        /// (d) No input panics, and too few finite points are never a pass.
        #[test]
        fn any_input_is_judged_without_panicking(
            canary in prop::collection::vec(any_point(), 0..30),
            baseline in prop::collection::vec(any_point(), 0..30),
            direction in direction(),
            tolerance in any::<f64>(),
            alpha in any::<f64>(),
            min_samples in prop_oneof![0_usize..12, Just(usize::MAX)],
        ) {
            let rules = Rules { direction, tolerance, alpha, min_samples };
            let result = compare(&canary, &baseline, &rules);
            let needed = min_samples.max(1);
            let finite = |points: &[f64]| points.iter().filter(|x| x.is_finite()).count();
            if finite(&canary) < needed || finite(&baseline) < needed {
                prop_assert_eq!(result.verdict, Verdict::Inconclusive);
                prop_assert_eq!(result.statistic, None);
            } else {
                prop_assert_ne!(result.verdict, Verdict::Inconclusive);
                let p = result.p_value.unwrap_or(f64::NAN);
                prop_assert!((0.0..=1.0).contains(&p), "p={}", p);
            }
            prop_assert!(result.explanation.len() <= MAX_EXPLANATION);
            prop_assert!(!result.explanation.is_empty());
        }
    }
}
