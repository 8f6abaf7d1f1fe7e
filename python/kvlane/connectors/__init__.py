# SPDX-License-Identifier: BSD-3-Clause
"""Engine connectors over kvlane: vllm (KVConnectorBase_V1 shape, kv_connector_module_path
"kvlane.connectors.vllm", class KvlaneConnector) and sglang (BaseKVManager / BaseKVSender /
BaseKVReceiver shape). Both use one kvlane.Runtime per process: use_runtime(rt) hands an
engine's own one over, else the first connector starts one from its configuration."""
from ._common import merge_runs, runtime, use_runtime

__all__ = ["use_runtime", "runtime", "merge_runs"]
