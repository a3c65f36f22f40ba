//! RFC 2782 target ordering, as a pure function over an SRV answer's records:
//! tiers by priority, weighted random order inside a tier. It owns no I/O and
//! no state; the randomness comes from the caller so tests can fix the seed.

use rand::Rng;

use crate::resolve::SrvRecord;

/// One target in dialing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderedTarget<'a> {
    /// 0 for the preferred tier (the smallest priority value), then 1, 2...
    pub tier: usize,
    pub record: &'a SrvRecord,
}

/// The targets of `records` in the order they should be dialed: the lowest
/// priority value first, weighted random order inside each tier. `.` targets
/// are left out, so an empty result means the service is not available.
///
/// Inside a tier, each pick draws a number from the running sum of the
/// weights left (RFC 2782). Weight-0 records stand first in that sum so they
/// keep a small chance, one in (sum of weights + 1); without any weight-0
/// record the draw starts at 1, so weights are followed exactly. A tier whose
/// weights are all 0 is ordered uniformly.
pub fn order_targets<'a, R: Rng + ?Sized>(
    records: &'a [SrvRecord],
    rng: &mut R,
) -> Vec<OrderedTarget<'a>> {
    let mut usable: Vec<&SrvRecord> = records.iter().filter(|r| r.target != ".").collect();
    usable.sort_by_key(|record| record.priority);
    let mut ordered = Vec::with_capacity(usable.len());
    for (tier, group) in usable.chunk_by(|a, b| a.priority == b.priority).enumerate() {
        let mut remaining = group.to_vec();
        while !remaining.is_empty() {
            let picked = pick_weighted(&remaining, rng);
            ordered.push(OrderedTarget {
                tier,
                record: remaining.remove(picked),
            });
        }
    }
    ordered
}

/// The index of the next record of a tier.
fn pick_weighted<R: Rng + ?Sized>(remaining: &[&SrvRecord], rng: &mut R) -> usize {
    let total: u32 = remaining.iter().map(|r| u32::from(r.weight)).sum();
    if total == 0 {
        return rng.random_range(0..remaining.len());
    }
    let zero_weights = remaining.iter().filter(|r| r.weight == 0).count();
    let draw = if zero_weights > 0 {
        rng.random_range(0..=total)
    } else {
        rng.random_range(1..=total)
    };
    if draw == 0 {
        let nth_zero = rng.random_range(0..zero_weights);
        return remaining
            .iter()
            .enumerate()
            .filter(|(_, r)| r.weight == 0)
            .nth(nth_zero)
            .map(|(index, _)| index)
            .expect("nth_zero is below the number of zero weights");
    }
    let mut running = 0;
    remaining
        .iter()
        .position(|record| {
            running += u32::from(record.weight);
            record.weight > 0 && running >= draw
        })
        .expect("the draw is at most the sum of the weights")
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    fn record(priority: u16, weight: u16, target: &str) -> SrvRecord {
        SrvRecord {
            priority,
            weight,
            port: 80,
            target: target.to_owned(),
        }
    }

    fn targets(ordered: &[OrderedTarget<'_>]) -> Vec<(usize, String)> {
        ordered
            .iter()
            .map(|t| (t.tier, t.record.target.clone()))
            .collect()
    }

    /// How often each target is picked first over `draws` orderings.
    fn first_pick_shares(records: &[SrvRecord], draws: usize) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(2782);
        let mut counts = vec![0usize; records.len()];
        for _ in 0..draws {
            let first = order_targets(records, &mut rng)[0].record;
            let index = records.iter().position(|r| r == first).unwrap();
            counts[index] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    #[test]
    fn lowest_priority_value_first_then_each_tier_in_turn() {
        let records = [
            record(20, 1, "c"),
            record(10, 1, "a"),
            record(30, 0, "d"),
            record(10, 1, "b"),
        ];
        let mut rng = StdRng::seed_from_u64(1);
        let ordered = targets(&order_targets(&records, &mut rng));
        assert_eq!(ordered.len(), 4);
        let mut first_tier: Vec<_> = ordered[..2].to_vec();
        first_tier.sort();
        assert_eq!(first_tier, [(0, "a".to_owned()), (0, "b".to_owned())]);
        assert_eq!(ordered[2], (1, "c".to_owned()));
        assert_eq!(ordered[3], (2, "d".to_owned()));
    }

    #[test]
    fn weights_set_the_share_of_first_picks() {
        let shares = first_pick_shares(&[record(1, 1, "light"), record(1, 3, "heavy")], 10_000);
        assert!((shares[0] - 0.25).abs() < 0.02, "light first {shares:?}");
        assert!((shares[1] - 0.75).abs() < 0.02, "heavy first {shares:?}");
    }

    #[test]
    fn a_zero_weight_keeps_a_small_chance() {
        let records = [
            record(1, 0, "spare"),
            record(1, 10, "a"),
            record(1, 10, "b"),
        ];
        let shares = first_pick_shares(&records, 10_000);
        // One chance in (sum of weights + 1) = 1/21.
        assert!(
            shares[0] > 0.02 && shares[0] < 0.08,
            "spare first {shares:?}"
        );
        assert!((shares[1] - shares[2]).abs() < 0.03, "{shares:?}");
    }

    #[test]
    fn all_zero_weights_are_uniform() {
        let records = [record(1, 0, "a"), record(1, 0, "b"), record(1, 0, "c")];
        for share in first_pick_shares(&records, 9_000) {
            assert!((share - 1.0 / 3.0).abs() < 0.03, "share {share}");
        }
    }

    #[test]
    fn every_target_appears_once() {
        let records = [
            record(1, 0, "a"),
            record(1, 5, "b"),
            record(1, 0, "c"),
            record(2, 7, "d"),
        ];
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..100 {
            let mut seen = targets(&order_targets(&records, &mut rng));
            seen.sort();
            let names: Vec<_> = seen.iter().map(|(_, t)| t.as_str()).collect();
            assert_eq!(names, ["a", "b", "c", "d"]);
        }
    }

    #[test]
    fn dot_targets_are_ignored() {
        let mut rng = StdRng::seed_from_u64(3);
        let only_dot = [record(0, 0, ".")];
        assert!(order_targets(&only_dot, &mut rng).is_empty());
        let mixed = [record(0, 0, "."), record(5, 1, "real")];
        assert_eq!(
            targets(&order_targets(&mixed, &mut rng)),
            [(0, "real".to_owned())]
        );
        assert!(order_targets(&[], &mut rng).is_empty());
    }
}
