"""The analysis pass's compiled loops (``_loops.c``; ``compiled.py``)."""

def topk_bounds(
    offsets: object,
    ids: object,
    slp: object,
    tlp: object,
    token_id: object,
    lq_T: object,
    lp_T: object,
    q_T: object,
    p_T: object,
    tv_out: object,
    kl_out: object,
    qmass_out: object,
    pmass_out: object,
    rho_out: object,
    empty_q_out: object,
    empty_p_out: object,
    rest_eps: float,
    tail_empty: float,
    /,
) -> None: ...
def count_codes(codes: object, counts: object, /) -> None: ...
