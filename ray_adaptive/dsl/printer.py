"""IR -> policy text. ``parse_policy(format_policy(p)) == p`` for every policy.

Expressions are printed with the fewest parentheses that keep their meaning
(by precedence), so the output reads like hand-written DSL.
"""

from __future__ import annotations

import json
import math

from ray_adaptive.dsl import ir

# precedence: higher binds tighter (Python's order, which the parser uses)
_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 5, "-": 5, "*": 6, "/": 6, "%": 6, "neg": 7, "atom": 9}
_CMP = set(ir.COMPARE_OPS)


def _prec(e: ir.Expr) -> int:
    if isinstance(e, ir.Binary):
        return _PREC["cmp"] if e.op in _CMP else _PREC[e.op]
    if isinstance(e, ir.Unary):
        return _PREC["not"] if e.op == "not" else _PREC["neg"]
    if isinstance(e, ir.Cond):
        return 0
    if isinstance(e, ir.Const) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool) and e.value < 0:
        return _PREC["neg"]
    return _PREC["atom"]


def _wrap(e: ir.Expr, min_prec: int) -> str:
    text = format_expr(e)
    return f"({text})" if _prec(e) < min_prec else text


def format_expr(e: ir.Expr) -> str:
    """One expression as DSL text."""
    if isinstance(e, ir.Const):
        v = e.value
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, float) and math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(e, (ir.Local, ir.StateRef)):
        return e.name
    if isinstance(e, ir.FieldRef):
        return f"{e.obj}.{e.name}"
    if isinstance(e, ir.Index):
        return f"{_wrap(e.base, _PREC['atom'])}[{format_expr(e.key)}]"
    if isinstance(e, ir.Unary):
        if e.op == "not":
            return f"not {_wrap(e.operand, _PREC['not'])}"
        return f"-{_wrap(e.operand, _PREC['neg'])}"
    if isinstance(e, ir.Binary):
        p = _prec(e)
        # left-associative: the right operand needs parentheses at equal precedence;
        # comparisons never chain, so both sides need them at equal precedence
        left_min = p + 1 if e.op in _CMP else p
        return f"{_wrap(e.left, left_min)} {e.op} {_wrap(e.right, p + 1)}"
    if isinstance(e, ir.Call):
        args = "node" if e.fn == "get_load" else ", ".join(format_expr(a) for a in e.args)
        return f"{e.fn}({args})"
    if isinstance(e, ir.Cond):
        return f"{_wrap(e.then, 1)} if {_wrap(e.test, 1)} else {_wrap(e.orelse, 0)}"
    if isinstance(e, ir.VecLit):
        return "[" + ", ".join(format_expr(i) for i in e.items) + "]"
    if isinstance(e, ir.MapLit):
        return "{" + ", ".join(f"{format_expr(k)}: {format_expr(v)}" for k, v in zip(e.keys, e.values)) + "}"
    raise TypeError(f"not an IR expression: {e!r}")


def _format_block(stmts, indent: str) -> list[str]:
    lines = []
    for s in stmts:
        if isinstance(s, ir.Assign):
            lines.append(f"{indent}{format_expr(s.target)} {s.op or ''}= {format_expr(s.value)}")
        elif isinstance(s, ir.Return):
            lines.append(f"{indent}return {format_expr(s.value)}")
        elif isinstance(s, ir.Pass):
            lines.append(f"{indent}pass")
        elif isinstance(s, ir.If):
            lines.append(f"{indent}if {format_expr(s.test)}:")
            lines += _format_block(s.body, indent + "  ")
            orelse = s.orelse
            # print `else: if ...` chains as elif
            while len(orelse) == 1 and isinstance(orelse[0], ir.If):
                lines.append(f"{indent}elif {format_expr(orelse[0].test)}:")
                lines += _format_block(orelse[0].body, indent + "  ")
                orelse = orelse[0].orelse
            if orelse:
                lines.append(f"{indent}else:")
                lines += _format_block(orelse, indent + "  ")
        else:
            raise TypeError(f"not an IR statement: {s!r}")
    return lines


def _annotations(fn: ir.Function) -> str:
    """`` [limit=1.2]`` of a Score, `` [grace=2.0, max=1]`` of a Preempt, else ``""``."""
    if fn.limit is not None:
        return f" [limit={fn.limit!r}]"
    if fn.grace is not None:
        return f" [grace={fn.grace!r}, max={fn.max_preemptions!r}]"
    return ""


def format_policy(policy: ir.Policy) -> str:
    """The policy as DSL text (comments are not kept)."""
    out: list[str] = []
    for title, fields in (("Task", policy.task_fields), ("Node", policy.node_fields)):
        if fields:
            out += [f"{title}:"] + [f"  {f.name}: {f.type}" for f in fields] + [""]
    if policy.state:
        out.append("State:")
        for d in policy.state:
            init = f" = {format_expr(d.init)}" if d.init is not None else ""
            out.append(f"  {d.name}: {d.type}{init}")
        out.append("")
    preempt = (policy.preempt,) if policy.preempt is not None else ()
    for fn in (policy.score, *preempt, *policy.hooks):
        out.append(f"{fn.name}({', '.join(fn.params)}):{_annotations(fn)}")
        out += _format_block(fn.body, "  ")
        out.append("")
    return "\n".join(out)
