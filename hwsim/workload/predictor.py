"""Expert predictors for pre-dispatch: which experts will layer l need?

- `oracle`: knows the routing; each needed expert is predicted with probability `accuracy`,
  and each miss is replaced by a wrong expert, so the prediction has the right size;
- `previous-layer`: layer l will use what layer l-1 used this step;
- `previous-token`: layer l will use what it used in the previous step.
"""

from __future__ import annotations

import numpy as np


def predict(kind: str, needed: set[int], experts: int, rng: np.random.Generator, accuracy: float,
            previous_layer: set[int] | None, previous_step: set[int] | None) -> set[int]:
    if kind == "previous-layer":
        return set(previous_layer or ())
    if kind == "previous-token":
        return set(previous_step or ())
    hit = {e for e in sorted(needed) if rng.random() < accuracy}
    wrong_pool = [e for e in range(experts) if e not in needed]
    n_wrong = min(len(needed) - len(hit), len(wrong_pool))
    wrong = set(rng.choice(wrong_pool, size=n_wrong, replace=False).tolist()) if n_wrong else set()
    return hit | wrong
