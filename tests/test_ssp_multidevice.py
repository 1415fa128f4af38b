"""`ssp-jax train` on a fake 4-device CPU mesh (data 2 x tensor 2 for the dims that divide)."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

from ssp_jax import cli  # noqa: E402
from test_ssp_train_cli import assets, fast_args, read_metrics  # noqa: E402,F401


@pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 (fake) devices")
def test_train_on_data_parallel_mesh(assets, tmp_path):  # noqa: F811
  workdir = str(tmp_path / "run")
  args = fast_args(assets, workdir, 1)
  args = [a for a in args if not a.startswith("--config.mesh.num_devices")]
  args += ["--config.mesh.num_devices=4", "--config.mesh.axes=(('data', 4), ('tensor', 1))",
           "--config.rl.micro_batch_size=4", "--config.rollout.batch_size=8"]
  assert cli.main(args) == 0
  rows = read_metrics(workdir)
  assert [r["step"] for r in rows] == [1] and rows[0]["learner/updates_total"] >= 1
