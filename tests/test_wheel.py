"""The package builds into a wheel that carries its presets and works without the source tree."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

REPO = pathlib.Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__", ".cache")


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        source = root / "source"
        shutil.copytree(REPO, source, ignore=SKIP, symlinks=True)  # build from a copy: no build/ in the repo
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "--wheel-dir", str(root / "dist"), str(source)], check=True, capture_output=True)
        cls.wheel = next((root / "dist").glob("t2t_keras-*.whl"))
        cls.site = root / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(cls.site),
                        str(cls.wheel)], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_wheel_carries_every_preset(self):
        names = zipfile.ZipFile(self.wheel).namelist()
        self.assertIn("t2t_keras/configs/base.yaml", names)
        presets = {path.name for path in (REPO / "t2t_keras" / "configs").glob("*.yaml")}
        self.assertEqual({pathlib.PurePath(n).name for n in names if n.startswith("t2t_keras/configs/")}, presets)

    def test_installed_wheel_describes_a_preset_outside_the_repository(self):
        env = dict(os.environ, PYTHONPATH=str(self.site), TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("T2T_KERAS_CONFIGS", None)
        with tempfile.TemporaryDirectory() as elsewhere:
            where = subprocess.run([sys.executable, "-c", "import t2t_keras; print(t2t_keras.__file__)"],
                                   cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
            result = subprocess.run([sys.executable, "-m", "t2t_keras", "describe", "--config", "base", "--json"],
                                    cwd=elsewhere, env=env, capture_output=True, text=True)
        self.assertTrue(where.stdout.strip().startswith(str(self.site)), where.stdout)
        self.assertEqual(result.returncode, 0, result.stderr)
        info = json.loads(result.stdout)
        self.assertEqual((info["hidden_dim"], info["num_layers"]), (512, 6))


if __name__ == "__main__":
    unittest.main()
