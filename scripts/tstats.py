# Student-t 95% intervals for the study scripts: t(0.975, df) for small df, and a mean with
# its interval over a handful of seeds.
import statistics as st

T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}


def mean_ci(v):
    """Mean and 95% t-interval half-width of v (nan with one value)."""
    m = st.mean(v)
    return m, T[len(v) - 1] * st.stdev(v) / len(v) ** 0.5 if len(v) > 1 else float("nan")
