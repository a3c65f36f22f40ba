//! Choosing among a location's endpoints. Round robin is nginx's smooth
//! weighted round robin, computed once per table build as the sequence of one
//! cycle so a pick is one atomic increment; least connections compares
//! requests in flight per weight, ties taken in turn. Both prefer, in order:
//! an endpoint that is healthy and not tried yet by this request, one not
//! tried yet, one healthy, any (a location whose endpoints all failed their
//! checks is still tried).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::endpoint::Endpoint;
use crate::config::LoadBalancing;

#[derive(Debug)]
pub enum Balancer {
    /// Indices into the endpoints, one smooth weighted cycle.
    RoundRobin {
        cycle: Box<[u32]>,
        next: AtomicUsize,
    },
    LeastConnections {
        next: AtomicUsize,
    },
}

impl Balancer {
    pub fn new(kind: LoadBalancing, weights: &[usize]) -> Balancer {
        match kind {
            LoadBalancing::RoundRobin => Balancer::RoundRobin {
                cycle: smooth_weighted_cycle(weights).into(),
                next: AtomicUsize::new(0),
            },
            LoadBalancing::LeastConnections => Balancer::LeastConnections {
                next: AtomicUsize::new(0),
            },
        }
    }

    /// The index of the endpoint to send to next, given those this request
    /// was already sent to; `None` when there are no endpoints.
    pub fn pick(&self, endpoints: &[Arc<Endpoint>], tried: &[Arc<Endpoint>]) -> Option<usize> {
        let preference = |index: usize| preference(&endpoints[index], tried);
        match self {
            Balancer::RoundRobin { cycle, next } => {
                if cycle.is_empty() {
                    return None;
                }
                let turn = next.fetch_add(1, Ordering::Relaxed);
                let mut best: Option<(u8, usize)> = None;
                for offset in 0..cycle.len() {
                    let index = cycle[(turn + offset) % cycle.len()] as usize;
                    let rank = preference(index);
                    if rank == BEST {
                        return Some(index);
                    }
                    if best.is_none_or(|(best_rank, _)| rank < best_rank) {
                        best = Some((rank, index));
                    }
                }
                best.map(|(_, index)| index)
            }
            Balancer::LeastConnections { next } => {
                if endpoints.is_empty() {
                    return None;
                }
                let start = next.fetch_add(1, Ordering::Relaxed);
                (0..endpoints.len())
                    .map(|offset| (start + offset) % endpoints.len())
                    // The first of equals wins, so ties go in turn from `start`.
                    .min_by(|&a, &b| {
                        preference(a)
                            .cmp(&preference(b))
                            .then_with(|| load_order(&endpoints[a], &endpoints[b]))
                    })
            }
        }
    }
}

const BEST: u8 = 0;

/// Lower is better: healthy and untried, untried, healthy, anything.
fn preference(endpoint: &Arc<Endpoint>, tried: &[Arc<Endpoint>]) -> u8 {
    let untried = !tried.iter().any(|other| other.same_place(endpoint));
    match (untried, endpoint.state.is_healthy()) {
        (true, true) => BEST,
        (true, false) => 1,
        (false, true) => 2,
        (false, false) => 3,
    }
}

/// Requests in flight per weight, compared without division.
fn load_order(a: &Endpoint, b: &Endpoint) -> std::cmp::Ordering {
    (a.state.in_flight() * b.weight()).cmp(&(b.state.in_flight() * a.weight()))
}

/// One cycle of nginx's smooth weighted round robin: each step every entry
/// gains its weight, the largest total is chosen (the first of equals) and
/// loses the sum of weights. Weights 3:1 give `a a b a`, never `a a a b`.
/// The cycle is as long as the weights' sum after dividing out their common
/// divisor, so equal weights cost one entry each.
pub fn smooth_weighted_cycle(weights: &[usize]) -> Vec<u32> {
    let divisor = weights.iter().copied().fold(0, gcd).max(1);
    let weights: Vec<i64> = weights.iter().map(|&w| (w / divisor) as i64).collect();
    let total: i64 = weights.iter().sum();
    let mut current = vec![0i64; weights.len()];
    let mut cycle = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (current, weight) in current.iter_mut().zip(&weights) {
            *current += weight;
        }
        let mut chosen = 0;
        for (index, value) in current.iter().enumerate() {
            if *value > current[chosen] {
                chosen = index;
            }
        }
        current[chosen] -= total;
        cycle.push(chosen as u32);
    }
    cycle
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letters(cycle: &[u32]) -> String {
        cycle.iter().map(|&i| (b'a' + i as u8) as char).collect()
    }

    #[test]
    fn smooth_sequences_as_nginx_gives_them() {
        let cases: [(&[usize], &str); 6] = [
            (&[3, 1], "aaba"),
            (&[1, 1, 1], "abc"),
            (&[2, 2], "ab"),
            (&[5, 1, 1], "aabacaa"),
            (&[1, 2], "bab"),
            (&[4, 2, 1], "abacaba"),
        ];
        for (weights, expected) in cases {
            assert_eq!(
                letters(&smooth_weighted_cycle(weights)),
                expected,
                "{weights:?}"
            );
        }
    }

    #[test]
    fn a_cycle_is_exact_in_proportion() {
        let weights = [7, 3, 127, 1];
        let cycle = smooth_weighted_cycle(&weights);
        assert_eq!(cycle.len(), 138);
        for (index, weight) in weights.iter().enumerate() {
            let count = cycle.iter().filter(|&&i| i as usize == index).count();
            assert_eq!(count, *weight);
        }
    }

    #[test]
    fn no_weights_no_cycle() {
        assert!(smooth_weighted_cycle(&[]).is_empty());
    }
}
