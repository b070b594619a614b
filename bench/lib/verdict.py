"""A median with its confidence interval, and what it says of a target.

The bench scripts pair each mode with a reference in the same round and
report the median of the per-round ratios. One run's median moves between
runs (the copy hook's ratio has read 1.29 in one run and 1.53 in the
next), so a median alone cannot say whether a target is met. This gives
the interval the median lies in with at least 95 % confidence, from the
rounds' order statistics alone (no assumption on the distribution: the
true median lies below the k-th smallest of n values with the probability
that a Binomial(n, 1/2) is below k), and reads a target against it:
"met" when the whole interval is at or under the target, "not met" when
it is wholly over, "undecided" otherwise (more rounds narrow it) and
whenever the rounds are too few for the confidence (under six).

Imported by the reports' Python with the bench's lib folder on sys.path.
"""

from math import comb
import statistics as st

LEVEL = 0.95


def median_ci(values, level=LEVEL):
    """(low, high, coverage) of the median of `values`; coverage is the
    interval's exact confidence: at least `level` when there are enough
    values (six or more for 95 %); with fewer, the widest interval (min,
    max) and its lower confidence (five values: 94 %).
    None for no values."""
    v = sorted(x for x in values if x == x)
    n = len(v)
    if n == 0:
        return None
    # P(Binomial(n, 1/2) < k), for the interval [v[k-1], v[n-k]].
    below = lambda k: sum(comb(n, i) for i in range(k)) / 2**n
    k = 1
    while k + 1 <= (n + 1) // 2 and 1 - 2 * below(k + 1) >= level:
        k += 1
    return v[k - 1], v[n - k], 1 - 2 * below(k)


def verdict(values, target, level=LEVEL):
    """How the median of `values` stands against `target` (lower is
    better): "met", "not met" or "undecided", with the interval."""
    ci = median_ci(values, level)
    if ci is None:
        return "no rounds"
    lo, hi, cov = ci
    if cov < level:
        word = "undecided (too few rounds)"
    else:
        word = "met" if hi <= target else "not met" if lo > target else "undecided"
    return f"{word} (median {st.median(values):.3f}, {cov:.0%} CI {lo:.3f}-{hi:.3f}, {len(values)} rounds; target <= {target})"


if __name__ == "__main__":
    # Self-check, run by tests of the bench scripts' helpers.
    assert median_ci([]) is None
    lo, hi, cov = median_ci([5, 1, 3])
    assert (lo, hi) == (1, 5) and abs(cov - 0.75) < 1e-9
    lo, hi, cov = median_ci(list(range(1, 21)))
    # n = 20: [x6, x15] covers 95.9 %; [x7, x14] only 88.5 %.
    assert (lo, hi) == (6, 15) and 0.958 < cov < 0.959, (lo, hi, cov)
    assert verdict([1.1, 1.2, 1.3, 1.2, 1.25, 1.15, 1.22], 1.5).startswith("met")
    assert verdict([1.6, 1.7, 1.65, 1.62, 1.68, 1.61, 1.7], 1.5).startswith("not met")
    assert verdict([1.4, 1.6, 1.45, 1.55, 1.5, 1.48, 1.52], 1.5).startswith("undecided")
    assert verdict([1.1, 1.2, 1.15, 1.12, 1.18], 1.5).startswith("undecided (too few")
    print("ok")
