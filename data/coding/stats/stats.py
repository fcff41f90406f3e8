"""Small statistics helpers. The task: make test_stats.py pass by fixing this module."""


def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) / len(values)


def median(values):
    """The middle value of a non-empty list; for an even length, the mean of the two middle values."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]
