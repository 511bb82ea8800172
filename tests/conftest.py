"""Settings every test shares."""

from __future__ import annotations

from hypothesis import settings

# No per-example deadline: the suite runs on shared 2-core machines, where a loaded moment
# made examples time out (hypothesis's DeadlineExceeded) though nothing was slow in the code.
# Tests that care about time measure it themselves.
settings.register_profile("leveret", deadline=None)
settings.load_profile("leveret")
