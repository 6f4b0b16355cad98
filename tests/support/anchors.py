"""Published runs the tests name: the speed model's calibrating Llama 3.1 8B run on one v6e-16."""

CALIBRATING_8B = "llama3_1_8b_8192_no_collective_matmul (1 x v6e-16)"


def anchor_named(name: str):
    from domain.perf.speed_anchors import V6E_ANCHORS

    [found] = [anchor for anchor in V6E_ANCHORS if anchor.name == name]
    return found
