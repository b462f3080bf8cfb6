"""Random legal schedules for property tests: every primitive is drawn from what is legal
at that point, so any wrong result is a compiler bug, not a bad schedule."""
from __future__ import annotations

from hypothesis import strategies as st

from kiln.te.relations import is_reduce


def _consumers_leaves(s, stage):
    """(host stage, leaf) pairs where `stage` may be computed: loops of stages that consume it
    and that enclose all of its consumers' computation."""
    consumers = [c for c in s.stages if any(s.stage_map[t.op] is stage for t in c.op.input_tensors())]
    if len(consumers) != 1:
        return []
    host = consumers[0]
    if host.attach_type == "inline":
        return []
    return [(host, iv) for iv in host.leaf_iter_vars]


def random_loop_primitives(data, s, stage, steps: int, allow_parallel=True):
    """Apply `steps` random loop transformations to one stage."""
    for _ in range(steps):
        leaves = stage.leaf_iter_vars
        choice = data.draw(st.sampled_from(["split", "split_nparts", "reorder", "fuse",
                                            "vectorize", "unroll", "parallel", "pragma", "tile"]))
        if choice in ("split", "split_nparts"):
            iv = data.draw(st.sampled_from(leaves))
            by = data.draw(st.integers(1, 9))
            if choice == "split":
                stage.split(iv, factor=by)
            else:
                stage.split(iv, nparts=by)
        elif choice == "tile":
            data_leaves = [iv for iv in leaves if not is_reduce(iv)]
            if len(data_leaves) >= 2:
                a, b = data.draw(st.permutations(data_leaves))[:2]
                stage.tile(a, b, data.draw(st.integers(1, 8)), data.draw(st.integers(1, 8)))
        elif choice == "reorder":
            stage.reorder(*data.draw(st.permutations(leaves)))
        elif choice == "fuse" and len(leaves) >= 2:
            k = data.draw(st.integers(0, len(leaves) - 2))
            if is_reduce(leaves[k]) == is_reduce(leaves[k + 1]):
                stage.fuse(leaves[k], leaves[k + 1])
        elif choice == "vectorize":
            cands = [iv for iv in leaves if not is_reduce(iv)]
            if cands:
                stage.vectorize(data.draw(st.sampled_from(cands)))
        elif choice == "unroll":
            stage.unroll(data.draw(st.sampled_from(leaves)))
        elif choice == "parallel" and allow_parallel:
            cands = [iv for iv in leaves if not is_reduce(iv)]
            if cands:
                stage.parallel(data.draw(st.sampled_from(cands)))
        elif choice == "pragma":
            stage.pragma(data.draw(st.sampled_from(leaves)), "auto_unroll_max_step",
                         data.draw(st.sampled_from([4, 16, 64])))


def random_placement(data, s, stage):
    """Leave the stage at the root, inline it, or compute it at a legal consumer loop."""
    options = ["root"]
    if not stage.op.reduce_axis and not stage.is_output:
        options.append("inline")
    spots = _consumers_leaves(s, stage)
    if spots:
        options.append("at")
    choice = data.draw(st.sampled_from(options))
    if choice == "inline":
        stage.compute_inline()
    elif choice == "at":
        host, iv = data.draw(st.sampled_from(spots))
        stage.compute_at(host, iv)
    return choice
