"""Pure statistics: numpy/scipy only, no I/O, no torch, no globals.

Functions take arrays and return frozen result objects with ``statistic``, ``pvalue``,
an effect size where one applies, ``summary()`` and ``to_dict()``.
"""
