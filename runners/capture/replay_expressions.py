"""The expressions a replay target may give (runners/capture/replay.py): `;flops=` (a FLOP model of the
dims) and `;grid=` (the launch grid at any config): arithmetic of names, numbers, + - * / // ** %,
cdiv, min and max (and a tuple, for a grid), checked before use and evaluated with every term bounded;
never Python's eval."""
from __future__ import annotations

import ast
import math
import operator

from triton_sweep.model.trial import ConfigError

BOUND = 1e30  # the largest term: a power beyond it is refused, never computed
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
FUNCTIONS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


def expression(field: str, text: str, names, tuples: bool = False):
    """A function of a dict of values (a ConfigError where a term passes BOUND) from `text`, an
    expression of `names`; refused at once, naming kernel.spec's `field`, where it is anything else."""
    def refused(why: str) -> ConfigError:
        return ConfigError(f"kernel.spec: {field}={text!r}: {why}")

    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as error:
        raise refused(f"not an expression: {error}") from None
    calls = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in (FUNCTIONS if id(node) in calls else names):
            raise refused(f"{node.id} is not " + ("cdiv, min or max" if id(node) in calls else
                                                  f"one of {', '.join(names)}"))
        if not (isinstance(node, (ast.Expression, ast.BinOp, ast.Name, ast.Load, *_OPERATORS))
                or isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
                or isinstance(node, ast.Constant) and type(node.value) in (int, float)
                or isinstance(node, (ast.USub, ast.UAdd))
                or isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords
                or tuples and node is tree.body and isinstance(node, ast.Tuple)):
            raise refused(f"only numbers, the names, + - * / // ** %, cdiv, min and max"
                          f"{' and a tuple' if tuples else ''} (found {type(node).__name__})")
    if isinstance(tree.body, ast.Tuple):
        return lambda values: tuple(_evaluated(item, values, refused) for item in tree.body.elts)
    return lambda values: _evaluated(tree.body, values, refused)


def _evaluated(node, values: dict, refused):
    """The value of an arithmetic node, refused (a ConfigError) where a term would pass BOUND."""
    if isinstance(node, ast.Constant):
        value = node.value
    elif isinstance(node, ast.Name):
        value = values[node.id]
    elif isinstance(node, ast.UnaryOp):
        value = _evaluated(node.operand, values, refused)
        value = -value if isinstance(node.op, ast.USub) else value
    elif isinstance(node, ast.Call):
        arguments = [_evaluated(argument, values, refused) for argument in node.args]
        try:
            value = FUNCTIONS[node.func.id](*arguments)
        except (ArithmeticError, TypeError, ValueError) as error:
            raise refused(f"{node.func.id}: {type(error).__name__}: {error}") from None
    else:
        left, right = _evaluated(node.left, values, refused), _evaluated(node.right, values, refused)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1 and right > 0
                                             and right * math.log10(abs(left)) > math.log10(BOUND)):
            raise refused(f"{left}**{right} is beyond {BOUND:g} (a power's exponent at most 64)")
        try:
            value = _OPERATORS[type(node.op)](left, right)
        except (ArithmeticError, ValueError) as error:
            raise refused(f"{type(error).__name__}: {error}") from None
    if not isinstance(value, (int, float)) or not abs(value) <= BOUND:
        raise refused(f"a term is {value!r}, beyond {BOUND:g} or not a real number")
    return value
