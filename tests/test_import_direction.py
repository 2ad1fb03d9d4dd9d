"""The package's imports run one way: layers -> model -> the parts beside it -> cli / main_job.

Every `import` in `t2t_keras/` (also those inside functions) is read with `ast`
and mapped to the part it comes from and the part it reaches. A part may
import only what `ALLOWED` lists for it; the layering is the one of STYLE.md:

    foundation (errors, special_ids, files, checksums, run_lock, architecture, config_paths, config, hardware,
                fast_path, keras_compat, backends; switches, the process-wide choices a command makes before
                TensorFlow loads, and the table of every choice made from the hardware; quiet_start, TensorFlow's
                start-up lines kept off a command's output)
      -> layers -> model, language_models -> build; layers -> adapters (LoRA on the projections)
      -> data, decoding                        shared by the parts above them
      params -> memory                         a training step's memory, estimated from the config (no TensorFlow)
      -> runs                                  the run directory, shared by the parts above it
      -> resolved_run                          what a user gives, resolved once into the config a run trains with
      -> tasks                                 what differs between translation, lm and mlm; its generator
      -> pretrained                            checkpoints of other toolkits imported as runs, and runs written
                                               in their layout (the one weight-name mapping, both ways)
      -> training, export, inspect             none of them imports another; export writes through pretrained
      -> artifacts                             any run or export opened, one interface: generate, score
      -> evaluation, serving, pipeline         scoring and serving what artifacts generate; the commands' steps
      -> beam                                  translate, score and prepare a corpus as Apache Beam pipelines
      -> distillation                          a teacher's translations, then a student trained on them
      -> cli, main_job
"""

import ast
import collections
import pathlib
import unittest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "t2t_keras"

FOUNDATION = {"errors", "special_ids", "files", "checksums", "run_lock", "architecture", "config_paths", "config",
              "families", "hardware", "fast_path", "keras_compat", "backends", "switches", "quiet_start"}
MODELS = {"layers", "model", "language_models", "build", "adapters"}
SHARED = FOUNDATION | MODELS | {"data", "decoding", "runs", "resolved_run", "tasks", "memory"}
ALLOWED = {
    "errors": set(),
    "families": {"errors"},
    "special_ids": set(),
    "files": {"errors"},
    "checksums": {"errors", "files"},
    "run_lock": {"errors", "files"},
    "switches": {"config", "config_paths", "hardware"},
    "hardware": set(),
    "fast_path": {"hardware", "switches"},
    "keras_compat": set(),
    "backends": {"errors"},
    "quiet_start": set(),
    "architecture": {"errors"},
    "config_paths": set(),
    "config": {"errors", "architecture", "config_paths", "special_ids"},
    "layers": FOUNDATION,
    "model": FOUNDATION | {"layers"},
    "language_models": FOUNDATION | {"layers", "model"},
    "build": FOUNDATION | {"model", "language_models"},
    "adapters": FOUNDATION | {"layers"},
    "params": FOUNDATION,
    "memory": FOUNDATION | {"params"},
    "describe": FOUNDATION | {"params", "model", "runs", "memory"},
    "data": FOUNDATION,
    "decoding": FOUNDATION | {"model"},
    "runs": FOUNDATION | MODELS | {"data"},
    "resolved_run": FOUNDATION | {"runs"},
    "tasks": FOUNDATION | MODELS | {"data", "decoding", "runs", "resolved_run"},
    "training": SHARED,
    "evaluation": SHARED | {"artifacts"},
    "export": SHARED | {"pretrained"},  # export --format marian writes through the import's own mapping
    "inspect": SHARED,
    "pretrained": SHARED,
    "serving": SHARED | {"artifacts", "inspect"},
    "artifacts": SHARED | {"export"},
    "pipeline": SHARED | {"training", "evaluation", "export", "inspect"},
    "main_job": SHARED | {"training", "evaluation", "export", "inspect", "pipeline", "artifacts"},
    "distillation": SHARED | {"pipeline", "beam"},  # distill --runner: the teacher's pass as a Beam pipeline
    # Corpus-scale translate, score and prepare as Apache Beam pipelines, over any artifact
    "beam": SHARED | {"artifacts", "evaluation"},
    "cli": SHARED | {"training", "evaluation", "export", "inspect", "serving", "main_job", "describe", "pipeline",
                     "artifacts", "distillation", "switches", "cli_arguments", "pretrained", "quiet_start", "beam"},
    "cli_arguments": {"config"},
    "__main__": {"cli"},
}


def part_of(module):
    """`t2t_keras.training.trainer` -> "training"; `t2t_keras.runs` -> "runs"."""
    names = module.split(".")
    return names[1] if len(names) > 1 else names[0]


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path):
    """The `t2t_keras` modules imported anywhere in the file, with their line numbers."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module != "t2t_keras":  # `from t2t_keras import config` names the module in the alias
                found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append((".relative", node.lineno))
    return [(name, line) for name, line in found if name.startswith(("t2t_keras", ".relative"))]


def package_edges():
    """`{(from_part, to_part): [file:line, ...]}` for every import that crosses parts."""
    edges = collections.defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        source = part_of(module_name(path))
        for name, line in imported_modules(path):
            target = "relative import" if name == ".relative" else part_of(name)
            if target != source:
                edges[(source, target)].append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    return edges


class ImportDirectionTest(unittest.TestCase):
    def test_every_part_is_placed(self):
        parts = {part_of(module_name(path)) for path in PACKAGE.rglob("*.py")} - {"t2t_keras"}
        self.assertEqual(parts - set(ALLOWED), set(), "add new parts of the package to ALLOWED")

    def test_imports_follow_the_layering(self):
        wrong = {f"{a} -> {b}": places for (a, b), places in package_edges().items()
                 if a != "t2t_keras" and b not in ALLOWED.get(a, set())}
        self.assertEqual(wrong, {}, "imports against the layering (see the module docstring)")

    def test_the_layering_has_no_cycle(self):
        done, visiting = set(), []

        def visit(part):
            self.assertNotIn(part, visiting, f"cycle: {' -> '.join(visiting + [part])}")
            if part in done:
                return
            visiting.append(part)
            for target in ALLOWED[part]:
                visit(target)
            visiting.pop()
            done.add(part)

        for part in ALLOWED:
            visit(part)

    def test_the_parts_beside_the_model_do_not_import_each_other(self):
        applications = {"training", "export", "inspect"}
        for part in applications:
            self.assertEqual(ALLOWED[part] & applications, set(), part)
        above = {"training", "evaluation", "export", "inspect", "serving", "cli", "main_job", "artifacts"}
        self.assertFalse(above & ALLOWED["runs"])

    def test_the_checker_sees_function_level_imports(self):
        edges = package_edges()
        self.assertIn(("cli", "pipeline"), edges)  # cli imports lazily, inside its command functions
        self.assertTrue(any(":" in place for place in edges[("cli", "pipeline")]))


if __name__ == "__main__":
    unittest.main()
