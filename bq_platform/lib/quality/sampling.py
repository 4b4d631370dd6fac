"""Is the visitor sample close to 1 in 200? A binomial bound on sampled visitors.

Each visitor is in the sample with probability ``p = 1/200``, so the sampled count among ``n``
is Binomial(n, p); the check passes within ``z`` standard deviations of ``n p``. The units are
visitor-hours from the hour manifests (no scan); a visitor in several hours correlates the
trials, hence the generous ``z = 5``. Below ``n p < 10`` the normal approximation means nothing
and the check is skipped (NIST/SEMATECH e-Handbook 7.2.4).
"""

import dataclasses
import math

MIN_EXPECTED = 10.0


@dataclasses.dataclass(frozen=True)
class SampleRatio:
    """Result of :func:`sample_ratio`; ``skipped`` means too few units for the bound."""

    units: int
    sampled: int
    expected: float
    lower: float
    upper: float
    passed: bool
    skipped: bool

    @property
    def ratio(self) -> float:
        return self.sampled / self.units if self.units else 0.0

    def describe(self) -> str:
        if self.skipped:
            return (
                f"skipped: {self.units} visitor-hours give an expected sample of "
                f"{self.expected:.1f} (< {MIN_EXPECTED:g}), too few for a binomial bound"
            )
        verdict = "within" if self.passed else "OUTSIDE"
        return (
            f"{self.sampled} of {self.units} visitor-hours sampled ({self.ratio:.3%}); "
            f"{verdict} [{self.lower:.1f}, {self.upper:.1f}] around {self.expected:.1f}"
        )


def sample_ratio(units: int, sampled: int, p: float = 1 / 200, z: float = 5.0) -> SampleRatio:
    """Compare ``sampled`` out of ``units`` with Binomial(units, p); ``ValueError`` if counts
    are negative, ``sampled > units`` or ``p`` not in (0, 1)."""
    if units < 0 or sampled < 0 or sampled > units or not 0 < p < 1:
        raise ValueError(f"bad sample counts: units={units}, sampled={sampled}, p={p}")
    expected = units * p
    sd = math.sqrt(units * p * (1 - p))
    lower, upper = expected - z * sd, expected + z * sd
    if expected < MIN_EXPECTED:
        return SampleRatio(units, sampled, expected, lower, upper, True, True)
    return SampleRatio(units, sampled, expected, lower, upper, lower <= sampled <= upper, False)
