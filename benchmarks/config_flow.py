"""The config's path through the code: a static trace of the calls that
pass it (or a value taken from it) on, from `train_lib.train_and_evaluate`.

A call counts where an argument mentions the config or a name bound from
it; it is resolved through the caller's imports to a function or class of
detector/ or ops/. A call "climbs" when the callee's package sits in a
higher layer than the caller's (LAYERS, docs/architecture.md's diagram).
"""

import ast
import pathlib

START = ("detector.engine.train_lib", "train_and_evaluate")
# Package -> layer, higher is nearer the entry points (docs/architecture.md).
LAYERS = {
    "detector.launch": 8,
    "detector.engine": 8,
    "detector.evaluation": 7,
    "detector.export": 7,
    "detector.state": 6,
    "detector.weights": 6,
    "detector.factory": 5,
    "detector.modeling": 4,
    "ops": 3,
    "detector.config": 2,
    "detector.data": 2,
    "detector.distributed": 2,
    "detector.utils": 2,
    "detector.predict": 1,
    "detector.imaging": 0,
}


def _layer(module: str) -> int:
    package = max(
        (p for p in LAYERS if module == p or module.startswith(p + ".")),
        key=len,
    )
    return LAYERS[package]


def _modules(root: pathlib.Path) -> dict[str, ast.Module]:
    found = {}
    for package in ("detector", "ops"):
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = ast.parse(path.read_text(), str(path))
    return found


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """name -> def: module functions, methods as 'Class.name', and a class
    as its __init__."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{node.name}.{item.name}"] = item
                    if item.name == "__init__":
                        found[node.name] = item
    return found


def _imports(tree: ast.Module, modules: set[str]) -> dict[str, tuple]:
    """local name -> (module, attribute or None)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    local = alias.asname or alias.name.split(".")[0]
                    names[local] = (alias.name, None)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in modules:
                    names[alias.asname or alias.name] = (full, None)
                elif node.module in modules:
                    names[alias.asname or alias.name] = (
                        node.module,
                        alias.name,
                    )
    return names


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def trace(root: pathlib.Path) -> tuple[set, list, list]:
    """(modules visited, cross-module calls, climbing calls) of the trace."""
    trees = _modules(root)
    functions = {m: _functions(t) for m, t in trees.items()}
    imports = {m: _imports(t, set(trees)) for m, t in trees.items()}

    def resolve(module, func):
        if isinstance(func, ast.Name):
            if func.id in functions[module]:
                return module, func.id
            target = imports[module].get(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(
            func.value, ast.Name
        ):
            target = imports[module].get(func.value.id)
            if target is not None:
                owner, attr = target
                name = func.attr if attr is None else f"{attr}.{func.attr}"
                target = (owner, name)
        else:
            return None
        if target and target[1] in functions.get(target[0], {}):
            return target
        return None

    visited, steps, climbs, seen = set(), [], [], set()

    def visit(module, name, carried):
        if (module, name) in seen:
            return
        seen.add((module, name))
        visited.add(module)
        node = functions[module][name]
        carried = set(carried)
        for statement in ast.walk(node):
            if isinstance(statement, ast.Assign) and (
                _names(statement.value) & carried
            ):
                for target in statement.targets:
                    carried |= _names(target)
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            target = resolve(module, call.func)
            if target is None:
                continue
            callee = functions[target[0]][target[1]]
            params = [
                a.arg
                for a in callee.args.posonlyargs
                + callee.args.args
                + callee.args.kwonlyargs
            ]
            params = [p for p in params if p not in ("self", "cls")]
            given = {
                params[i]
                for i, arg in enumerate(call.args)
                if i < len(params) and _names(arg) & carried
            } | {
                kw.arg
                for kw in call.keywords
                if kw.arg and _names(kw.value) & carried
            }
            if not given:
                continue
            if target[0] != module:
                steps.append((module, target[0]))
                if _layer(target[0]) > _layer(module):
                    climbs.append((module, ".".join(target)))
            visit(*target, given)

    visit(*START, {"config"})
    return visited, steps, climbs
