"""No function in `t2t_keras/` is longer than 40 lines, apart from the ones `ALLOWED` names with a reason.

A function's length counts from its `def` line to its last line, docstring
included (ast's `end_lineno - lineno + 1`); nested functions and methods count
on their own as well as inside the function that holds them. STYLE.md asks for
functions under ~40 lines: a longer one is split into well-named helpers.
"""

import ast
import pathlib
import unittest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "t2t_keras"
MAX_LINES = 40
# "path relative to t2t_keras/:qualified name" -> why it may be longer. Argument tables stay; the others are
# waiting to be split: remove an entry when its function is split, so that the list shrinks to argument tables.
ALLOWED = {
    "cli_arguments.py:build_parser": "argument table: one add_argument call per flag",
}


def functions(tree):
    """Every function and method of a module as `(qualified name, node)`, nested ones included."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def long_functions(source, max_lines=MAX_LINES):
    """`(line, qualified name, length)` of each function in `source` longer than `max_lines`."""
    return [(node.lineno, name, node.end_lineno - node.lineno + 1)
            for name, node in functions(ast.parse(source))
            if node.end_lineno - node.lineno + 1 > max_lines]


class FunctionLengthTest(unittest.TestCase):
    def test_no_function_over_the_limit(self):
        found = []
        for path in sorted(PACKAGE.rglob("*.py")):
            relative = path.relative_to(PACKAGE).as_posix()
            for line, name, length in long_functions(path.read_text(encoding="utf-8")):
                if f"{relative}:{name}" not in ALLOWED:
                    found.append(f"t2t_keras/{relative}:{line} {name} is {length} lines (at most {MAX_LINES})")
        self.assertEqual(found, [], "split these into smaller, well-named functions:\n" + "\n".join(found))

    def test_finds_a_long_function_in_a_class(self):
        body = "".join(f"        x{i} = {i}\n" for i in range(MAX_LINES))
        source = f"class A:\n    def short(self):\n        return 1\n\n    def long(self):\n{body}"
        self.assertEqual(long_functions(source), [(5, "A.long", MAX_LINES + 1)])
        self.assertEqual(long_functions(source, max_lines=MAX_LINES + 1), [])


if __name__ == "__main__":
    unittest.main()
