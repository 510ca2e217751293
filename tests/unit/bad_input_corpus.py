"""Issue 61, target 3: a wide corpus of bad inputs (job fields, profile fields of every kind,
``--set`` values, every command's flags, damaged homes), as data. Run by
tests/unit/test_bad_input_corpus.py, in process, each case with a fresh cwd and $FSDP_ORCH_HOME.

A case is REFUSED (exit 2, one error line holding every ``expect`` fragment, no traceback, nothing
written under the cwd or the home) or ACCEPTED (exit 0, no traceback): legitimate edge values kept
so that tightening never refuses a real setup.

Bounds this corpus holds the code to (fsdp_orch/jobspec/limits.py): nodes <= 100000,
procs_per_node <= 1024, spare_nodes <= 100000, counts of restarts <= 1000000, checkpoint interval
<= 10**9 steps; watch's timeouts >= 1 s and its poll_interval >= 0.1 s (a timeout shorter than a
poll is meaningless); names printable, without bidi or other format characters, <= 200
characters; digits ASCII everywhere (Python's int() reads '٩٤٦٤')."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# SAFE: either, as long as it is clean (where the outcome depends on who runs it: root reads a
# file of mode 0, and writes a read-only one)
REFUSED, ACCEPTED, SAFE = "refused", "accepted", "safe"
OK_JOB = "name: demo\nscript: train.py\n"
BIG = "1" + "0" * 400  # 400 digits
TINY = "0.000001"
ARABIC_9464 = "\u0669\u0664\u0666\u0664"  # '٩٤٦٤': int() takes it as 9464
ARABIC_3 = "\u0663"


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    expect: tuple[str, ...] = ()
    outcome: str = REFUSED
    files: dict[str, str | bytes] = field(default_factory=dict)  # under the cwd
    home: dict[str, str | bytes] = field(default_factory=dict)  # under $FSDP_ORCH_HOME
    setup: Callable[[Path, Path], None] | None = None  # (cwd, home): what files cannot say


def render(extra: str = "", *flags: str, cluster: str = "local",
           files: dict[str, str | bytes] | None = None) -> dict[str, object]:
    return {"argv": ("render", "job.yaml", "--cluster", cluster, *flags),
            "files": {"job.yaml": OK_JOB + extra, **(files or {})}}


CASES: list[Case] = []


def bad(id: str, expect: tuple[str, ...], **kw: object) -> None:
    CASES.append(Case(id, expect=expect, **kw))  # type: ignore[arg-type]


def good(id: str, **kw: object) -> None:
    CASES.append(Case(id, outcome=ACCEPTED, **kw))  # type: ignore[arg-type]


def job_field(id: str, yaml: str, field_path: str, *expect: str) -> None:
    """A job whose ``yaml`` (appended to a valid job) is refused naming ``field_path``."""
    bad(f"job-{id}", ("job.yaml:", f"{field_path}:", *expect), **render(yaml))


# --- the job spec, field by field ----------------------------------------------------------------

for id, value, *expect in [
        ("empty", "''", "non-empty"), ("blank", "'   '", "non-empty"),
        ("number", "123", "string"), ("list", "[a]", "string"), ("null", "null", "string"),
        ("too-long", "a" * 201, "at most 200"),
        ("rlo", '"invoice\\u202Etxt.exe"', "U+202E"), ("lro", '"a\\u202Db"', "U+202D"),
        ("rli", '"a\\u2067b"', "U+2067"), ("fsi", '"a\\u2068b"', "U+2068"),
        ("pdi", '"a\\u2069b"', "U+2069"), ("rlm", '"a\\u200Fb"', "U+200F"),
        ("lrm", '"a\\u200Eb"', "U+200E"), ("alm", '"a\\u061Cb"', "U+061C"),
        ("zwsp", '"a\\u200Bb"', "U+200B"), ("bom", '"\\uFEFFdemo"', "U+FEFF"),
        ("nel", '"a\\x85b"', "U+0085"), ("line-separator", '"a\\u2028b"', "U+2028"),
        ("paragraph-separator", '"a\\u2029b"', "U+2029"), ("csi", '"a\\x9bb"', "U+009B"),
        ("vertical-tab", '"a\\vb"', "control"), ("bell", '"a\\ab"', "control"),
        ("backspace", '"a\\bb"', "control")]:
    bad(f"job-name-{id}", ("job.yaml:", "name:", *expect),
        argv=("render", "job.yaml", "--cluster", "local"),
        files={"job.yaml": f"name: {value}\nscript: train.py\n"})
good("job-name-unicode-letters", argv=("render", "job.yaml", "--cluster", "local"),
     files={"job.yaml": "name: \"n\u00e4chtlich-\u5b66\u4e60-\u0645\u0631\u062d\u0628\u0627\"\n"
                        "script: train.py\n"})
good("job-name-200-chars", argv=("render", "job.yaml", "--cluster", "local"),
     files={"job.yaml": f"name: {'a' * 200}\nscript: train.py\n"})

for id, yaml, fld, *expect in [
        ("script-empty", "script: ''", "script", "a script path"),
        ("script-list", "script: [a]", "script", "string"),
        ("script-nul", 'script: "a\\0b"', "script", "NUL"),
        ("script-newline", 'script: "a\\nb.py"', "script", "line feed"),
        ("module-empty", "module: ''", "module", "module name"),
        ("module-space", "module: 'pkg train'", "module", "module name"),
        ("module-dash-m", "module: '-m pkg'", "module", "module name"),
        ("module-slash", "module: pkg/train.py", "module", "module name"),
        ("command-empty-list", "command: []", "command", "at least one word"),
        ("command-empty-string", "command: ''", "command", "at least one word"),
        ("command-empty-word", "command: ['']", "command", "program"),
        ("command-unterminated", "command: \"echo 'x\"", "command", "cannot split"),
        ("command-mapping", "command: {a: b}", "command", "list"),
        ("command-nul", 'command: ["a\\0b"]', "command.0", "NUL")]:
    files = {"job.yaml": f"name: demo\n{yaml}\n"}
    if id.startswith("script"):
        files = {"job.yaml": f"name: demo\n{yaml}\n"}
    bad(f"job-{id}", ("job.yaml:", f"{fld}:", *expect),
        argv=("render", "job.yaml", "--cluster", "local"), files=files)

for id, yaml, fld, *expect in [
        ("args-string", "args: --steps 5", "args", "list"),
        ("args-mapping", "args: {a: 1}", "args", "list"),
        ("args-nested-list", "args: [[a]]", "args.0", "string"),
        ("args-null-item", "args: [null]", "args.0", "string"),
        ("launcher-empty", "launcher: ''", "launcher", "'torchrun'"),
        ("launcher-number", "launcher: 5", "launcher", "'torchrun'"),
        ("launcher-typo", "launcher: torchrunn", "launcher", "'torchrun'"),
        ("nodes-huge", "nodes: 1000000000000", "nodes", "at most 100000"),
        ("nodes-400-digits", f"nodes: {BIG}", "nodes", "at most 100000"),
        ("nodes-100001", "nodes: 100001", "nodes", "at most 100000"),
        ("nodes-float", "nodes: 1.5", "nodes", "whole number"),
        ("nodes-empty", "nodes: ''", "nodes", "node count"),
        ("nodes-range-zero", "nodes: 0-2", "nodes", "1 <= MIN <= MAX"),
        ("nodes-range-huge", "nodes: 1-1000000000", "nodes", "at most 100000"),
        ("nodes-range-400-digits", f"nodes: 1-{BIG}", "nodes", "at most 100000"),
        ("nodes-arabic-digits", f"nodes: '{ARABIC_3}'", "nodes", "node count"),
        ("nodes-arabic-range", f"nodes: '1-{ARABIC_3}'", "nodes", "node count"),
        ("nodes-list", "nodes: [1, 2]", "nodes", "node count"),
        ("spare-nodes-negative", "spare_nodes: -1", "spare_nodes", "greater than or equal to 0"),
        ("spare-nodes-huge", "spare_nodes: 1000000000000", "spare_nodes", "at most 100000"),
        ("spare-nodes-text", "spare_nodes: some", "spare_nodes", "integer"),
        ("spare-nodes-bool", "spare_nodes: true", "spare_nodes", "number"),
        ("procs-zero", "procs_per_node: 0", "procs_per_node", "greater than 0"),
        ("procs-negative", "procs_per_node: -3", "procs_per_node", "greater than 0"),
        ("procs-10e12", "procs_per_node: 1000000000000", "procs_per_node", "at most 1024"),
        ("procs-1025", "procs_per_node: 1025", "procs_per_node", "at most 1024"),
        ("procs-400-digits", f"procs_per_node: {BIG}", "procs_per_node", "at most 1024"),
        ("procs-float", "procs_per_node: 2.5", "procs_per_node", "integer"),
        ("procs-text", "procs_per_node: many", "procs_per_node", "integer"),
        ("procs-arabic", f"procs_per_node: '{ARABIC_3}'", "procs_per_node", "integer"),
        ("env-list", "env: [A]", "env", "dictionary"),
        ("env-value-list", "env: {A: [1, 2]}", "env.A", "string"),
        ("env-empty-name", "env: {'': x}", "env", "not a valid shell name"),
        ("env-name-space", "env: {'A B': x}", "env", "not a valid shell name"),
        ("env-name-unicode", "env: {\"\u00c4\": x}", "env", "not a valid shell name"),
        ("env-value-nul", 'env: {A: "a\\0b"}', "env.A", "NUL"),
        ("env-fault-bogus", "env: {FSDP_ORCH_FAULT: 'explode:now'}", "env", "fault"),
        ("workdir-empty", "workdir: ''", "workdir", "folder"),
        ("workdir-nul", 'workdir: "a\\0b"', "workdir", "NUL"),
        ("workdir-list", "workdir: [a]", "workdir", "string"),
        ("accelerate-config-empty", "accelerate_config: ''", "accelerate_config", "file"),
        ("accelerate-config-number", "accelerate_config: 5", "accelerate_config", "string"),
        ("top-unknown", "nodez: 2", "nodez", "did you mean 'nodes'"),
        ("top-unknown-no-hint", "zzzzzz: 2", "zzzzzz", "unknown field"),
        ("fsdp-not-mapping", "fsdp: full", "fsdp", "dictionary"),
        ("fsdp-strategy-empty", "fsdp: {sharding_strategy: ''}", "fsdp.sharding_strategy",
         "'FULL_SHARD'"),
        ("fsdp-strategy-zero", "fsdp: {sharding_strategy: 0}", "fsdp.sharding_strategy",
         "'FULL_SHARD'"),
        ("fsdp-min-num-params-zero", "fsdp: {min_num_params: 0}", "fsdp.min_num_params",
         "greater than 0"),
        ("fsdp-min-num-params-negative", "fsdp: {min_num_params: -5}", "fsdp.min_num_params",
         "greater than 0"),
        ("fsdp-mixed-precision", "fsdp: {mixed_precision: fp8}", "fsdp.mixed_precision", "'bf16'"),
        ("fsdp-version", "fsdp: {version: 3}", "fsdp.version", "1 or 2"),
        ("fsdp-state-dict", "fsdp: {state_dict_type: LOCAL}", "fsdp.state_dict_type",
         "'SHARDED_STATE_DICT'"),
        ("fsdp-prefetch", "fsdp: {backward_prefetch: SOMETIMES}", "fsdp.backward_prefetch",
         "'BACKWARD_PRE'"),
        ("fsdp-wrap", "fsdp: {auto_wrap_policy: ALL}", "fsdp.auto_wrap_policy", "'NO_WRAP'"),
        ("fsdp-offload-maybe", "fsdp: {offload_params: maybe}", "fsdp.offload_params", "bool"),
        ("fsdp-xla-settings-list", "fsdp: {xla_fsdp_settings: [1]}", "fsdp.xla_fsdp_settings",
         "dictionary"),
        ("fsdp-layer-cls-number", "fsdp: {transformer_layer_cls_to_wrap: 5}",
         "fsdp.transformer_layer_cls_to_wrap", "list"),
        ("fsdp-unknown", "fsdp: {shard: yes}", "fsdp.shard", "unknown field"),
        ("fsdp-twice", "fsdp: {fsdp_version: 1, version: 2}", "fsdp", "given twice"),
        ("ckpt-not-mapping", "checkpoint: out", "checkpoint", "dictionary"),
        ("ckpt-interval-zero", "checkpoint: {interval: 0}", "checkpoint.interval", "above 0"),
        ("ckpt-interval-negative", "checkpoint: {interval: -5}", "checkpoint.interval", "above 0"),
        ("ckpt-interval-fraction", "checkpoint: {interval: 1.5}", "checkpoint.interval",
         "above 0"),
        ("ckpt-interval-word", "checkpoint: {interval: often}", "checkpoint.interval", "'auto'"),
        ("ckpt-interval-huge", f"checkpoint: {{interval: {BIG}}}", "checkpoint.interval",
         "at most 1000000000"),
        ("ckpt-interval-arabic", f"checkpoint: {{interval: '{ARABIC_3}'}}", "checkpoint.interval",
         "above 0"),
        ("ckpt-keep-last-zero", "checkpoint: {keep_last: 0}", "checkpoint.keep_last",
         "greater than or equal to 1"),
        ("ckpt-keep-last-huge", f"checkpoint: {{keep_last: {BIG}}}", "checkpoint.keep_last",
         "at most 1000000"),
        ("ckpt-dir-empty", "checkpoint: {dir: ''}", "checkpoint.dir", "folder"),
        ("ckpt-dir-nul", 'checkpoint: {dir: "a\\0b"}', "checkpoint.dir", "NUL"),
        ("ckpt-file-empty", "checkpoint: {file: ''}", "checkpoint.file", "file path"),
        ("ckpt-resume-empty", "checkpoint: {resume: ''}", "checkpoint.resume", "'auto'"),
        ("ckpt-async-sometimes", "checkpoint: {async_save: sometimes}", "checkpoint.async_save",
         "auto, true or false"),
        ("ckpt-mtbf-zero", "checkpoint: {auto_mtbf: 0}", "checkpoint.auto_mtbf",
         "greater than 0"),
        ("ckpt-mtbf-negative", "checkpoint: {auto_mtbf: -1h}", "checkpoint.auto_mtbf",
         "duration"),
        ("ckpt-resume-args-bad-placeholder", "checkpoint: {resume_args: ['--from={ckpt}']}",
         "checkpoint.resume_args", "unknown placeholder {ckpt}"),
        ("ckpt-init-args-string", "checkpoint: {init_args: 5}", "checkpoint.init_args", "list"),
        ("ckpt-unknown", "checkpoint: {every: 5}", "checkpoint.every", "unknown field"),
        ("restart-max-negative", "restart: {max_restarts: -1}", "restart.max_restarts",
         "greater than or equal to 0"),
        ("restart-max-huge", f"restart: {{max_restarts: {BIG}}}", "restart.max_restarts",
         "at most 1000000"),
        ("restart-max-text", "restart: {max_restarts: lots}", "restart.max_restarts", "integer"),
        ("restart-oom-negative", "restart: {max_oom_restarts: -1}", "restart.max_oom_restarts",
         "greater than or equal to 0"),
        ("restart-oom-huge", "restart: {max_oom_restarts: 1000000000000}",
         "restart.max_oom_restarts", "at most 1000000"),
        ("restart-crash-loop-one", "restart: {crash_loop_attempts: 1}",
         "restart.crash_loop_attempts", "greater than or equal to 2"),
        ("restart-crash-loop-huge", f"restart: {{crash_loop_attempts: {BIG}}}",
         "restart.crash_loop_attempts", "at most 1000000"),
        ("restart-retry-on-bogus", "restart: {retry_on: [gremlins]}", "restart.retry_on.0",
         "gremlins"),
        ("restart-retry-on-string", "restart: {retry_on: oom}", "restart.retry_on", "list"),
        ("backoff-initial-zero", "restart: {backoff: {initial: 0}}", "restart.backoff.initial",
         "greater than 0"),
        ("backoff-initial-negative", "restart: {backoff: {initial: -1s}}",
         "restart.backoff.initial", "duration"),
        ("backoff-initial-400-digits", f"restart: {{backoff: {{initial: {BIG}}}}}",
         "restart.backoff.initial", "finite"),
        ("backoff-initial-parsec", "restart: {backoff: {initial: 1 parsec}}",
         "restart.backoff.initial", "duration like 90s"),
        ("backoff-max-zero", "restart: {backoff: {max: 0}}", "restart.backoff.max",
         "greater than 0"),
        ("backoff-multiplier-half", "restart: {backoff: {multiplier: 0.5}}",
         "restart.backoff.multiplier", "greater than or equal to 1"),
        ("backoff-multiplier-nan", "restart: {backoff: {multiplier: .nan}}",
         "restart.backoff.multiplier", "finite"),
        ("backoff-jitter-negative", "restart: {backoff: {jitter: -1}}",
         "restart.backoff.jitter", "non-negative"),
        ("backoff-unknown", "restart: {backoff: {factor: 2}}", "restart.backoff.factor",
         "unknown field"),
        ("watch-heartbeat-zero", "watch: {heartbeat_timeout: 0}", "watch.heartbeat_timeout",
         "at least 1s"),
        ("watch-heartbeat-tiny", f"watch: {{heartbeat_timeout: {TINY}}}",
         "watch.heartbeat_timeout", "at least 1s"),
        ("watch-heartbeat-negative", "watch: {heartbeat_timeout: -5}", "watch.heartbeat_timeout",
         "non-negative"),
        ("watch-heartbeat-words", "watch: {heartbeat_timeout: five minutes}",
         "watch.heartbeat_timeout", "duration like 90s"),
        ("watch-heartbeat-arabic", f"watch: {{heartbeat_timeout: '{ARABIC_3}0s'}}",
         "watch.heartbeat_timeout", "duration like 90s"),
        ("watch-heartbeat-inf", "watch: {heartbeat_timeout: .inf}", "watch.heartbeat_timeout",
         "finite"),
        ("watch-heartbeat-ms", "watch: {heartbeat_timeout: 5ms}", "watch.heartbeat_timeout",
         "at least 1s"),
        ("watch-startup-tiny", "watch: {startup_timeout: 0.01}", "watch.startup_timeout",
         "at least 1s"),
        ("watch-collective-zero", "watch: {collective_timeout: 0}", "watch.collective_timeout",
         "at least 1s"),
        ("watch-node-timeout-tiny", f"watch: {{node_timeout: {TINY}}}", "watch.node_timeout",
         "at least 1s"),
        ("watch-node-timeout-zero", "watch: {node_timeout: 0}", "watch.node_timeout",
         "at least 1s"),
        ("watch-node-timeout-400-digits", f"watch: {{node_timeout: {BIG}}}",
         "watch.node_timeout", "finite"),
        ("watch-poll-zero", "watch: {poll_interval: 0}", "watch.poll_interval", "at least 0.1s"),
        ("watch-poll-tiny", f"watch: {{poll_interval: {TINY}}}", "watch.poll_interval",
         "at least 0.1s"),
        ("watch-poll-above-heartbeat", "watch: {poll_interval: 10m, heartbeat_timeout: 1m}",
         "watch", "poll_interval (600s) must be at most heartbeat_timeout (60s)"),
        ("watch-adaptive-min-tiny", f"watch: {{adaptive_min: {TINY}}}", "watch.adaptive_min",
         "at least 0.1s"),
        ("watch-adaptive-multiplier-one", "watch: {adaptive_multiplier: 1}",
         "watch.adaptive_multiplier", "greater than 1"),
        ("watch-hang-detection", "watch: {hang_detection: auto}", "watch.hang_detection",
         "'fixed' or 'adaptive'"),
        ("watch-expect-ranks", "watch: {expect_ranks: maybe}", "watch.expect_ranks", "bool"),
        ("watch-stragglers-kill", "watch: {stragglers: kill}", "watch.stragglers", "'replace'"),
        ("watch-stragglers-replace-local", "watch: {stragglers: replace}", "watch.stragglers",
         "spare"),
        ("watch-unknown", "watch: {timeout: 5}", "watch.timeout", "unknown field"),
        ("launch-standby-maybe", "launch: {standby: maybe}", "launch.standby", "'auto' or 'off'"),
        ("launch-prepare-negative", "launch: {prepare_standby_after: -1}",
         "launch.prepare_standby_after", "non-negative"),
        ("launch-umask-999", "launch: {umask: '999'}", "launch.umask", "octal umask"),
        ("launch-umask-int", "launch: {umask: 22}", "launch.umask", "octal umask"),
        ("launch-umask-empty", "launch: {umask: ''}", "launch.umask", "octal umask"),
        ("notify-not-list", "notify: https://x", "notify", "list"),
        ("notify-url-empty", "notify: [{url: ''}]", "notify.0.url", "http"),
        ("notify-url-ftp", "notify: [{url: 'ftp://x/y'}]", "notify.0.url", "http"),
        ("notify-retry-zero", "notify: [{url: 'https://x/y', retry_for: 0}]",
         "notify.0.retry_for", "greater than 0"),
        ("notify-format", "notify: [{url: 'https://x/y', format: xml}]", "notify.0.format",
         "'json' or 'slack'"),
        ("notify-when-bogus", "notify: [{url: 'https://x/y', when: [EXPLODED]}]", "notify.0.when",
         "EXPLODED"),
        ("fit-not-mapping", "fit: big", "fit", "dictionary"),
        ("fit-model-empty", "fit: {model: ''}", "fit.model", "at least 1"),
        ("fit-batch-zero", "fit: {model: m, batch_size: 0}", "fit.batch_size", "greater than 0"),
        ("fit-batch-huge", f"fit: {{model: m, batch_size: {BIG}}}", "fit.batch_size",
         "at most 1000000"),
        ("fit-seq-negative", "fit: {model: m, seq_len: -1}", "fit.seq_len", "greater than 0"),
        ("fit-seq-huge", "fit: {model: m, seq_len: 1000000000000}", "fit.seq_len",
         "at most 100000000"),
        ("fit-optimizer", "fit: {model: m, optimizer: lion}", "fit.optimizer", "'adamw'"),
        ("fit-dtype", "fit: {model: m, dtype: fp8}", "fit.dtype", "'float32'"),
        ("fit-lora-r-zero", "fit: {model: m, lora: {r: 0}}", "fit.lora.r", "greater than 0"),
        ("fit-lora-r-huge", "fit: {model: m, lora: {r: 1000000000000}}", "fit.lora.r",
         "at most 65536"),
        ("fit-lora-dropout-one", "fit: {model: m, lora: {dropout: 1.0}}", "fit.lora.dropout",
         "less than 1"),
        ("fit-lora-quantize", "fit: {model: m, lora: {quantize: int3}}", "fit.lora.quantize",
         "'nf4'"),
        ("fit-unknown", "fit: {model: m, layers: 3}", "fit.layers", "unknown field")]:
    job_field(id, yaml + "\n", fld, *expect)

# whole documents
for id, text, *expect in [
        ("not-a-mapping-list", "- a\n- b\n", "mapping"),
        ("not-a-mapping-number", "42\n", "mapping"),
        ("empty", "", "empty document"),
        ("only-null", "null\n", "mapping"),
        ("duplicate-key", OK_JOB + "nodes: 1\nnodes: 2\n", "duplicate key 'nodes'"),
        ("duplicate-nested-key", OK_JOB + "watch:\n  poll_interval: 1\n  poll_interval: 2\n",
         "duplicate key 'poll_interval'"),
        ("tab-indent", "name: demo\nwatch:\n\tpoll_interval: 1\nscript: x.py\n", "YAML"),
        ("billion-laughs", OK_JOB + "args: &a [x, x, x, x, x, x, x, x, x]\n"
         + "".join(f"z{i}: &a{i} [*{'a' if i == 0 else f'a{i - 1}'}, "
                   f"*{'a' if i == 0 else f'a{i - 1}'}, *{'a' if i == 0 else f'a{i - 1}'}]\n"
                   for i in range(12)), "job.yaml"),
        ("recursive-alias", OK_JOB + "fsdp: &a {xla_fsdp_settings: *a}\n", "alias"),
        ("not-utf8", b"name: demo\nscript: caf\xe9.py\n", "UTF-8"),
        ("utf16", "name: demo\nscript: train.py\n".encode("utf-16"), "UTF-8"),
        ("nul-byte", b"name: demo\x00\nscript: train.py\n", "job.yaml"),
        ("python-tag", OK_JOB + "nodes: !!python/object/apply:os.system ['true']\n", "job.yaml"),
        ("deep-nesting", OK_JOB + "fsdp: {xla_fsdp_settings: " + "[" * 5000 + "]" * 5000 + "}\n",
         "job.yaml"),
        ("huge-key", OK_JOB + "k" * 100000 + ": 1\n", "job.yaml:3"),
        ("binary", bytes(range(256)) * 4, "job.yaml")]:
    bad(f"doc-{id}", (*expect,), argv=("render", "job.yaml", "--cluster", "local"),
        files={"job.yaml": text})

# legitimate edge values of a job
for id, yaml in [("nodes-1", "nodes: 1"), ("procs-1024", "procs_per_node: 1024"),
                 ("heartbeat-1s", "watch: {heartbeat_timeout: 1s, poll_interval: 0.1}"),
                 ("node-timeout-1s", "watch: {node_timeout: 1}"),
                 ("adaptive-min-100ms", "watch: {adaptive_min: 100ms}"),
                 ("restart-zero", "restart: {max_restarts: 0}"),
                 ("keep-last-1", "checkpoint: {keep_last: 1}"),
                 ("interval-auto", "checkpoint: {interval: auto}"),
                 ("jitter-zero", "restart: {backoff: {jitter: 0}}"),
                 ("prepare-standby-zero", "launch: {prepare_standby_after: 0}"),
                 ("stragglers-off", "watch: {stragglers: 'off'}"),
                 ("env-empty-value", "env: {A: ''}"),
                 ("args-numbers", "args: [--lr, 3.0e-4, --steps, 100]"),
                 ("module-dotted", "module: pkg.sub.train"),
                 ("fit-seq-1m", "fit: {model: m, seq_len: 1048576}")]:
    extra = yaml + "\n"
    files = {"job.yaml": (OK_JOB if not yaml.startswith("module") else "name: demo\n") + extra}
    good(f"job-ok-{id}", argv=("render", "job.yaml", "--cluster", "local"), files=files)

# --- cluster profiles, every kind -----------------------------------------------------------------

SLURM = "kind: slurm\n"
SSH = "kind: ssh\nhosts: [{address: node1}, {address: node2}]\n"
SSH_ONE = "kind: ssh\nhosts: [{address: node1}]\n"
TPU = ("kind: tpu-vm\ntpu_name: t1\nzone: us-central2-b\naccelerator_type: v4-8\n"
       "runtime_version: tpu-ubuntu2204-base\n")
LOCAL = "kind: local\n"
KINDS = {"local": LOCAL, "slurm": SLURM, "ssh": SSH, "tpu": TPU}
LAUNCHER = {"tpu": "launcher: python\n"}


def profile_case(id: str, kind: str, yaml: str, fld: str, *expect: str,
                 job_extra: str = "") -> None:
    job = OK_JOB + LAUNCHER.get(kind, "") + job_extra
    key = yaml.partition(":")[0]
    base = "".join(line + "\n" for line in KINDS[kind].splitlines()
                   if line.partition(":")[0] != key)  # the case's value replaces the base's
    bad(f"profile-{kind}-{id}", ("mine.yaml", f"{fld}:", *expect),
        argv=("render", "job.yaml", "--cluster", "mine"),
        files={"job.yaml": job, "clusters/mine.yaml": base + yaml + "\n"})


for kind in KINDS:  # what every kind's profile has
    for id, yaml, fld, *expect in [
            ("python-empty", "python: ''", "python", "interpreter"),
            ("python-blank", "python: '  '", "python", "interpreter"),
            ("python-nul", 'python: "py\\0"', "python", "NUL"),
            ("python-newline", 'python: "python3\\nrm -rf x"', "python", "line feed"),
            ("shared-dir-relative", "shared_dir: runs", "shared_dir", "absolute path"),
            ("shared-dir-empty", "shared_dir: ''", "shared_dir", "absolute path"),
            ("gpu-memory-half-byte", "gpu_memory: 0.5", "gpu_memory", "from 1 byte"),
            ("gpu-memory-400-digits", f"gpu_memory: {BIG}", "gpu_memory", "from 1 byte"),
            ("gpu-memory-arabic", "gpu_memory: '\u0668\u0660GB'", "gpu_memory", "80GB"),
            ("gpu-memory-negative", "gpu_memory: -80GB", "gpu_memory", "80GB"),
            ("gpu-memory-unit", "gpu_memory: 80 parsecs", "gpu_memory", "80GB"),
            ("env-bad-name", "env: {'1X': a}", "env", "not a valid shell name"),
            ("env-list", "env: [a]", "env", "dictionary"),
            ("template-empty", "template: ''", "template", "template"),
            ("description-list", "description: [a]", "description", "string"),
            ("notify-url", "notify: [{url: 'file:///etc/passwd'}]", "notify.0.url", "http"),
            ("unknown-key", "nodez: 1", "nodez", "unknown field")]:
        profile_case(id, kind, yaml, fld, *expect)

for kind, id, yaml, fld, *expect in [
        ("local", "device", "device: tpu", "device", "'auto'"),
        ("local", "procs-zero", "procs_per_node: 0", "procs_per_node", "greater than 0"),
        ("local", "procs-huge", "procs_per_node: 1000000000000", "procs_per_node", "at most 1024"),
        ("local", "rdzv-host-empty", "rdzv_host: ''", "rdzv_host", "host name or IP address"),
        ("local", "rdzv-host-space", "rdzv_host: 'a b'", "rdzv_host", "host name or IP address"),
        ("slurm", "time-words", "time: 'one hour'", "time", "SLURM time limit"),
        ("slurm", "time-unquoted", "time: 1:00:00", "time", "quoted SLURM time limit"),
        ("slurm", "time-empty", "time: ''", "time", "SLURM time limit"),
        ("slurm", "time-arabic", "time: '\u0663\u0660'", "time", "SLURM time limit"),
        ("slurm", "gpus-negative", "gpus_per_node: -1", "gpus_per_node",
         "greater than or equal to 0"),
        ("slurm", "gpus-huge", "gpus_per_node: 1000000000000", "gpus_per_node", "at most 1024"),
        ("slurm", "cpus-zero", "cpus_per_task: 0", "cpus_per_task", "greater than 0"),
        ("slurm", "cpus-huge", f"cpus_per_task: {BIG}", "cpus_per_task", "at most 100000"),
        ("slurm", "mem-words", "mem: lots", "mem", "SLURM memory"),
        ("slurm", "mem-negative", "mem: -5G", "mem", "SLURM memory"),
        ("slurm", "mem-newline", 'mem: "4G\\n#SBATCH --x"', "mem", "SLURM memory"),
        ("slurm", "partition-empty", "partition: ''", "partition", "SLURM name"),
        ("slurm", "partition-newline", 'partition: "gpu\\n#SBATCH --uid=0"', "partition",
         "SLURM name"),
        ("slurm", "account-space", "account: 'my account'", "account", "SLURM name"),
        ("slurm", "qos-semicolon", "qos: 'high;rm'", "qos", "SLURM name"),
        ("slurm", "constraint-newline", 'constraint: "a100\\nx"', "constraint", "line feed"),
        ("slurm", "sbatch-extra-bad-key", "sbatch_extra: {'Mail Type': END}", "sbatch_extra",
         "option name"),
        ("slurm", "sbatch-extra-list", "sbatch_extra: {exclude: [a, b]}", "sbatch_extra.exclude",
         "valid string"),
        ("slurm", "sbatch-extra-newline", 'sbatch_extra: {comment: "a\\nb"}', "sbatch_extra",
         "line feed"),
        ("slurm", "container-no-image", "container: {mounts: []}", "container.image",
         "missing required field"),
        ("slurm", "signal-delay-negative", "signal_delay: -1", "signal_delay",
         "greater than or equal to 0"),
        ("slurm", "signal-delay-huge", f"signal_delay: {BIG}", "signal_delay", "at most"),
        ("slurm", "spare-negative", "spare_nodes: -1", "spare_nodes",
         "greater than or equal to 0"),
        ("slurm", "spare-huge", "spare_nodes: 1000000000000", "spare_nodes", "at most 100000"),
        ("slurm", "setup-string", "setup: module load cuda", "setup", "list"),
        ("slurm", "job-folder-empty", "job_folder: ''", "job_folder", "folder"),
        ("ssh", "hosts-empty", "hosts: []", "hosts", "at least 1"),
        ("ssh", "host-address-empty", "hosts: [{address: ''}]", "hosts.0.address", "at least 1"),
        ("ssh", "host-address-space", "hosts: [{address: 'a b'}]", "hosts.0.address",
         "host name or IP address"),
        ("ssh", "host-port-zero", "hosts: [{address: a, port: 0}]", "hosts.0.port",
         "greater than 0"),
        ("ssh", "host-port-big", "hosts: [{address: a, port: 70000}]", "hosts.0.port",
         "less than 65536"),
        ("ssh", "host-port-text", "hosts: [{address: a, port: ssh}]", "hosts.0.port", "integer"),
        ("ssh", "host-port-arabic", f"hosts: [{{address: a, port: '{ARABIC_9464}'}}]",
         "hosts.0.port", "integer"),
        ("ssh", "host-unknown", "hosts: [{address: a, pasword: x}]", "hosts.0.pasword",
         "unknown field"),
        ("ssh", "host-user-newline", 'hosts: [{address: a, user: "u\\nx"}]', "hosts.0.user",
         "line feed"),
        ("ssh", "rdzv-port-low", "rdzv_port: 80", "rdzv_port", "greater than 1024"),
        ("ssh", "rdzv-port-arabic", f"rdzv_port: '{ARABIC_9464}'", "rdzv_port", "integer"),
        ("ssh", "connect-timeout-zero", "connect_timeout: 0", "connect_timeout", "greater than 0"),
        ("ssh", "connect-timeout-huge", f"connect_timeout: {BIG}", "connect_timeout", "at most"),
        ("ssh", "policy", "host_key_policy: none", "host_key_policy", "'strict'"),
        ("ssh", "procs-zero", "procs_per_node: 0", "procs_per_node", "greater than 0"),
        ("ssh", "procs-huge", "procs_per_node: 1000000000000", "procs_per_node", "at most 1024"),
        ("ssh", "own-disks-no-workdir", "shared_filesystem: false", "remote_workdir",
         "absolute folder"),
        ("ssh", "venv-empty", "venv: ''", "venv", "folder"),
        ("ssh", "known-hosts-empty", "known_hosts: ''", "known_hosts", "file"),
        ("tpu", "name-upper", "tpu_name: UPPER", "tpu_name", "pattern"),
        ("tpu", "zone-empty", "zone: ''", "zone", "at least 1"),
        ("tpu", "workers-zero", "num_workers: 0", "num_workers", "greater than 0"),
        ("tpu", "workers-huge", "num_workers: 1000000000000", "num_workers", "at most 100000"),
        ("tpu", "ready-timeout-zero", "ready_timeout: 0", "ready_timeout", "greater than 0"),
        ("tpu", "ssh-port-zero", "ssh_port: 0", "ssh_port", "greater than 0"),
        ("tpu", "remote-workdir-relative", "remote_workdir: work", "remote_workdir",
         "absolute folder"),
        ("tpu", "pjrt-device", "pjrt_device: GPU", "pjrt_device", "'TPU' or 'CPU'"),
        ("tpu", "address", "address: both", "address", "'internal' or 'external'"),
        ("tpu", "spot-maybe", "spot: maybe", "spot", "bool")]:
    profile_case(id, kind, yaml, fld, *expect)

# missing required fields, whole profile documents
for id, text, *expect in [
        ("tpu-missing-name", "kind: tpu-vm\nzone: z\naccelerator_type: v\nruntime_version: r\n",
         "tpu_name", "missing required field"),
        ("ssh-missing-hosts", "kind: ssh\n", "hosts", "missing required field"),
        ("no-kind", "partition: gpu\n", "kind"),
        ("kind-number", "kind: 5\n", "kind"),
        ("list", "- kind: local\n", "mapping"),
        ("empty", "", "empty document"),
        ("duplicate", "kind: local\nkind: slurm\n", "duplicate key 'kind'"),
        ("not-utf8", b"kind: local\ndescription: caf\xe9\n", "UTF-8")]:
    bad(f"profile-doc-{id}", ("mine.yaml", *expect),
        argv=("render", "job.yaml", "--cluster", "mine"),
        files={"job.yaml": OK_JOB, "clusters/mine.yaml": text})

# stragglers: replace needs a spare node the cluster can give
bad("stragglers-replace-slurm-no-spare", ("job.yaml", "watch.stragglers:", "spare"),
    argv=("render", "job.yaml", "--cluster", "mine"),
    files={"job.yaml": OK_JOB + "watch: {stragglers: replace}\n", "clusters/mine.yaml": SLURM})
bad("stragglers-replace-ssh-no-spare-host", ("job.yaml", "watch.stragglers:", "spare"),
    argv=("render", "job.yaml", "--cluster", "mine"),
    files={"job.yaml": OK_JOB + "nodes: 2\nwatch: {stragglers: replace}\n",
           "clusters/mine.yaml": SSH})
bad("stragglers-replace-tpu", ("job.yaml", "watch.stragglers:", "spare"),
    argv=("render", "job.yaml", "--cluster", "mine"),
    files={"job.yaml": OK_JOB + "launcher: python\nwatch: {stragglers: replace}\n",
           "clusters/mine.yaml": TPU})
bad("stragglers-replace-set", ("watch.stragglers:", "spare"),
    argv=("render", "job.yaml", "--cluster", "local", "--set", "watch.stragglers=replace"),
    files={"job.yaml": OK_JOB})
good("stragglers-replace-slurm-profile-spare", argv=("render", "job.yaml", "--cluster", "mine"),
     files={"job.yaml": OK_JOB + "watch: {stragglers: replace}\n",
            "clusters/mine.yaml": SLURM + "spare_nodes: 1\n"})
good("stragglers-replace-slurm-job-spare", argv=("render", "job.yaml", "--cluster", "mine"),
     files={"job.yaml": OK_JOB + "spare_nodes: 1\nwatch: {stragglers: replace}\n",
            "clusters/mine.yaml": SLURM})
good("stragglers-replace-ssh-spare-host", argv=("render", "job.yaml", "--cluster", "mine"),
     files={"job.yaml": OK_JOB + "watch: {stragglers: replace}\n", "clusters/mine.yaml": SSH})

# legitimate profiles at their edges
for id, profile in [("slurm-mem-0", SLURM + "mem: 0\n"),
                    ("slurm-mem-0-quoted", SLURM + "mem: '0'\n"),
                    ("slurm-mem-64G", SLURM + "mem: 64G\n"),
                    ("slurm-mem-500000M", SLURM + "mem: 500000M\n"),
                    ("slurm-mem-int-mb", SLURM + "mem: 64000\n"),
                    ("slurm-gpus-0", SLURM + "gpus_per_node: 0\n"),
                    ("slurm-time-minutes", SLURM + "time: '30'\n"),
                    ("slurm-time-days", SLURM + "time: '2-00:00:00'\n"),
                    ("slurm-signal-delay-0", SLURM + "signal_delay: 0\n"),
                    ("slurm-partition-commas", SLURM + "partition: 'gpu,gpu-long'\n"),
                    ("slurm-constraint-expr", SLURM + "constraint: 'a100&ib'\n"),
                    ("slurm-sbatch-extra-bool", SLURM + "sbatch_extra: {exclusive: true}\n"),
                    ("local-python-path", LOCAL + "python: /usr/bin/python3\n"),
                    ("local-gpu-memory-80GB", LOCAL + "gpu_memory: 80GB\n"),
                    ("local-gpu-memory-1PiB", LOCAL + "gpu_memory: 1024TiB\n"),
                    ("ssh-ipv6", "kind: ssh\nhosts: [{address: '::1'}]\n"),
                    ("ssh-port-65535", "kind: ssh\nhosts: [{address: a, port: 65535}]\n")]:
    good(f"profile-ok-{id}", argv=("render", "job.yaml", "--cluster", "mine"),
         files={"job.yaml": OK_JOB, "clusters/mine.yaml": profile})

# --- --set values ------------------------------------------------------------------------------


def set_case(id: str, item: str, fld: str, *expect: str, outcome: str = REFUSED) -> None:
    argv = ("render", "job.yaml", "--cluster", "local", "--set", item)
    if outcome == ACCEPTED:
        good(f"set-ok-{id}", argv=argv, files={"job.yaml": OK_JOB})
    else:
        bad(f"set-{id}", ("--set", f"{fld}", *expect), argv=argv, files={"job.yaml": OK_JOB})


for id, item, fld, *expect in [
        ("nodes-huge", "nodes=1000000000000", "nodes:", "at most 100000"),
        ("nodes-400-digits", f"nodes={BIG}", "nodes:", "at most 100000"),
        ("procs-huge", "procs_per_node=1000000000000", "procs_per_node:", "at most 1024"),
        ("name-empty", "name=", "name:", "non-empty"),
        ("name-rlo", "name=a\u202eb", "name:", "U+202E"),
        ("name-null", "name=null", "name:", "string"),
        ("node-timeout-tiny", f"watch.node_timeout={TINY}", "watch.node_timeout:", "at least 1s"),
        ("heartbeat-arabic", f"watch.heartbeat_timeout={ARABIC_3}0s", "watch.heartbeat_timeout:",
         "duration"),
        ("poll-zero", "watch.poll_interval=0", "watch.poll_interval:", "at least 0.1s"),
        ("no-equals", "nodes", "expected KEY.PATH=VALUE"),
        ("empty-key", "=5", "expected KEY.PATH=VALUE"),
        ("empty-item", "", "expected KEY.PATH=VALUE"),
        ("dots-only", "..=1", "expected KEY.PATH=VALUE"),
        ("nodes-list", "nodes=[1, 2]", "nodes:", "node count"),
        ("fsdp-scalar", "fsdp=3", "fsdp:", "dictionary"),
        ("into-scalar", "name.x=1", "name.x", "not a mapping"),
        ("unknown", "nodez=2", "nodez:", "did you mean 'nodes'"),
        ("restart-huge", f"restart.max_restarts={BIG}", "restart.max_restarts:", "at most"),
        ("interval-zero", "checkpoint.interval=0", "checkpoint.interval:", "above 0"),
        ("env-name", "env.1X=a", "env", "not a valid shell name"),
        ("umask", "launch.umask=abc", "launch.umask:", "octal umask"),
        ("yaml-tag", "nodes=!!python/name:os.system", "nodes:", "node count"),
        ("stragglers", "watch.stragglers=kill", "watch.stragglers:", "'replace'"),
        ("script-empty", "script=", "script:", "a script path")]:
    set_case(id, item, fld, *expect)
set_case("nodes-string-1", "nodes='1'", "", outcome=ACCEPTED)
set_case("env-yaml-looking", "env.A=[1, 2]", "", outcome=ACCEPTED)
set_case("args", "args=[--steps, '5']", "", outcome=ACCEPTED)
set_case("value-with-equals", "env.OPTS=a=b", "", outcome=ACCEPTED)

# --- flags of every command -----------------------------------------------------------------------

JOB_FILES = {"job.yaml": OK_JOB, "train.py": ""}
UNKNOWN = "abcdef123456"
for command in ("status", "cancel", "events", "logs", "report"):
    bad(f"{command}-unknown-id", ("no job with id", UNKNOWN), argv=(command, UNKNOWN))
    bad(f"{command}-id-rlo", ("JOB_ID:", "U+202E"), argv=(command, "abc\u202e"))
    bad(f"{command}-id-nul-like", ("JOB_ID:", "control"), argv=(command, "abc\x1b[2J"))
    bad(f"{command}-id-too-long", ("JOB_ID:", "at most"), argv=(command, "a" * 10000))
for command, flag in [("logs", "--rank"), ("logs", "--node"), ("logs", "--attempt")]:
    bad(f"{command}{flag}-arabic", (flag, "whole number"), argv=(command, UNKNOWN, flag, ARABIC_3))
    bad(f"{command}{flag}-negative", (flag, "whole number"), argv=(command, UNKNOWN, flag, "-1"))
    bad(f"{command}{flag}-word", (flag, "whole number"), argv=(command, UNKNOWN, flag, "two"))
    bad(f"{command}{flag}-huge", (flag, "whole number"), argv=(command, UNKNOWN, flag, BIG))
for value in (ARABIC_3, "-1", "0", "x", BIG):
    bad(f"status--limit-{value[:8]!s}", ("--limit", "whole number"),
        argv=("status", "--limit", value))
good("status-limit-1", argv=("status", "--limit", "1"))
good("status-empty-home", argv=("status",))
good("status-json-empty-home", argv=("status", "--json"))
for value in (ARABIC_3, "-1", "x", BIG):
    bad(f"render--attempt-{value[:8]}", ("--attempt", "whole number"),
        argv=("render", "job.yaml", "--cluster", "local", "--attempt", value), files=JOB_FILES)
for value, expect in [("", "--job-id"), ("../../etc", "--job-id"), ("a b", "--job-id"),
                      ("a\u202eb", "--job-id"), ("a" * 500, "--job-id")]:
    bad(f"render--job-id-{value[:6]!r}", (expect, "job id"),
        argv=("render", "job.yaml", "--cluster", "local", "--job-id", value), files=JOB_FILES)
for value, expect in [(ARABIC_9464, "port"), ("70000", "port"), ("-1", "port"), ("", "port"),
                      ("x", "port"), ("127.0.0.1:", "port"), (BIG, "port"),
                      (f"127.0.0.1:{ARABIC_9464}", "port"), ("[::1]:99999", "port")]:
    bad(f"metrics--serve-{value[:12]!r}", ("--serve", expect), argv=("metrics", "--serve", value))
for value in ("0", "-1", "nan", "inf", ARABIC_3, BIG, "x"):
    bad(f"metrics--every-{value[:6]}", ("--every", "seconds"),
        argv=("metrics", "--textfile", ".", "--every", value))
bad("metrics--textfile-missing", ("--textfile", "existing directory"),
    argv=("metrics", "--textfile", "nowhere"))
bad("metrics--token-file-without-serve", ("--token-file", "--serve"),
    argv=("metrics", "--textfile", ".", "--token-file", "t"))
bad("metrics--token-file-missing", ("--token-file", "cannot read"),
    argv=("metrics", "--serve", "0", "--token-file", "nowhere"))
for value, expect in [("forever", "duration"), ("-1s", "--timeout"), (f"{ARABIC_3}0s", "duration"),
                      (BIG, "finite"), ("nan", "duration")]:
    bad(f"submit--timeout-{value[:8]}", ("--timeout", expect),
        argv=("submit", "job.yaml", "--cluster", "local", "--wait", "--timeout", value),
        files=JOB_FILES)
for command in ("submit", "fit"):
    for value in ("0.5", BIG, "\u0668\u0660GB", "-1GB", "80 parsecs", "", "0", "2PiB"):
        bad(f"{command}--gpu-memory-{value[:10]!r}",
            ("--gpu-memory", "expected one argument" if value.startswith("-") else "80GB"),
            argv=(command, "job.yaml", "--cluster", "local", "--gpu-memory", value),
            files={**JOB_FILES, "job.yaml": OK_JOB + "fit: {model: m}\n"})
bad("submit--idempotency-key-newline", ("--idempotency-key", "line feed"),
    argv=("submit", "job.yaml", "--cluster", "local", "--idempotency-key", "a\nb"),
    files=JOB_FILES)
bad("submit--idempotency-key-rlo", ("--idempotency-key", "U+202E"),
    argv=("submit", "job.yaml", "--cluster", "local", "--idempotency-key", "a\u202eb"),
    files=JOB_FILES)
bad("submit--init-from-newline", ("--init-from", "line feed"),
    argv=("submit", "job.yaml", "--cluster", "local", "--init-from", "a\nb"), files=JOB_FILES)
bad("submit-bad-job-makes-no-run-folder", ("job.yaml", "nodes:", "at most 100000"),
    argv=("submit", "job.yaml", "--cluster", "local"),
    files={**JOB_FILES, "job.yaml": OK_JOB + "nodes: 1000000000000\n"})
bad("submit-stragglers-replace-local", ("job.yaml", "watch.stragglers:", "spare"),
    argv=("submit", "job.yaml", "--cluster", "local"),
    files={**JOB_FILES, "job.yaml": OK_JOB + "watch: {stragglers: replace}\n"})
bad("submit-missing-job-file", ("job.yaml", "not found"),
    argv=("submit", "job.yaml", "--cluster", "local"))
bad("submit-python-empty", ("here.yaml", "python:", "interpreter"),
    argv=("submit", "job.yaml", "--cluster", "here"),
    files={**JOB_FILES, "clusters/here.yaml": "kind: local\npython: ''\n"})
bad("fit-no-fit-block", ("fit",), argv=("fit", "job.yaml", "--cluster", "local"),
    files=JOB_FILES)
bad("fit-config-hidden-size-0", ("fit.model", "hidden_size"),
    argv=("fit", "job.yaml", "--cluster", "local"),
    files={"job.yaml": OK_JOB + "fit: {model: cfg}\n",
           "cfg/config.json": '{"model_type": "llama", "hidden_size": 0, "num_hidden_layers": 2,'
                              ' "num_attention_heads": 4, "intermediate_size": 64,'
                              ' "vocab_size": 100}'})
bad("fit-config-not-json", ("fit.model", "config.json"),
    argv=("fit", "job.yaml", "--cluster", "local"),
    files={"job.yaml": OK_JOB + "fit: {model: cfg}\n", "cfg/config.json": "{not json"})
bad("fit-config-list", ("fit.model", "config.json"),
    argv=("fit", "job.yaml", "--cluster", "local"),
    files={"job.yaml": OK_JOB + "fit: {model: cfg}\n", "cfg/config.json": "[1, 2]"})
for id, args, expect in [
        ("max-catch-up-arabic", ("--max-catch-up", ARABIC_3), "--max-catch-up"),
        ("max-catch-up-negative", ("--max-catch-up", "-1"), "--max-catch-up"),
        ("max-catch-up-huge", ("--max-catch-up", BIG), "--max-catch-up"),
        ("tz-bogus", ("--tz", "Mars/Olympus"), "--tz"),
        ("tz-path", ("--tz", "../../etc/passwd"), "--tz"),
        ("concurrency", ("--concurrency", "sometimes"), "--concurrency"),
        ("cron-short", ("--cron", "* * *"), "--cron"),
        ("cron-arabic", ("--cron", f"{ARABIC_3} * * * *"), "--cron"),
        ("cron-out-of-range", ("--cron", "99 * * * *"), "--cron")]:
    cron = () if "--cron" in args else ("--cron", "0 3 * * *")
    bad(f"schedule-add-{id}", (expect,),
        argv=("schedule", "add", "nightly", "job.yaml", "--cluster", "local", *cron, *args),
        files=JOB_FILES)
bad("schedule-add-name-rlo", ("NAME:",),
    argv=("schedule", "add", "a\u202eb", "job.yaml", "--cluster", "local", "--cron", "0 3 * * *"),
    files=JOB_FILES)
bad("schedule-events-unknown", ("nightly",), argv=("schedule", "events", "nightly"))
bad("schedule-remove-unknown", ("nightly",), argv=("schedule", "remove", "nightly"))
bad("schedule-pause-unknown", ("nightly",), argv=("schedule", "pause", "nightly"))
bad("schema-unknown", ("what",), argv=("schema", "cluster"))
bad("doctor-unknown-cluster", ("--cluster", "unknown cluster"),
    argv=("doctor", "--cluster", "nowhere"))
bad("doctor-cluster-bad-profile", ("mine.yaml", "time:"), argv=("doctor", "--cluster", "mine"),
    files={"clusters/mine.yaml": SLURM + "time: forever\n"})
bad("diagnose-missing-file", ("nowhere.log",), argv=("diagnose", "nowhere.log"))
bad("diagnose-folder", ("logs",), argv=("diagnose", "logs"), files={"logs/x": "x"})
bad("unknown-command", ("invalid choice",), argv=("explode",))
bad("render-unknown-flag", ("unrecognized arguments",),
    argv=("render", "job.yaml", "--cluster", "local", "--nodes", "2"), files=JOB_FILES)
bad("render-cluster-rlo", ("--cluster", "unknown cluster"),
    argv=("render", "job.yaml", "--cluster", "loc\u202eal"), files=JOB_FILES)
bad("render-accelerate-config-folder", ("acc", "accelerate config"),
    argv=("render", "job.yaml", "--cluster", "local", "--accelerate-config", "acc"),
    files={**JOB_FILES, "acc/x": "x"})

# --- damaged homes --------------------------------------------------------------------------------


def a_job(home: Path, job_id: str = "abc123") -> Path:
    """A submitted job in the home's runs folder (its event log only)."""
    from fsdp_orch.record.events import EventWriter
    from fsdp_orch.record.journal import Journal

    run_dir = home / "runs" / job_id
    cli = Journal(EventWriter(run_dir, "submit"), job_id)
    cli.submitted(name="demo", cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
                  job_file="/jobs/job.yaml", spec_hash="h", idempotency_key=None)
    return run_dir


def read_only_db(cwd: Path, home: Path) -> None:
    """A real index, then made read-only (and its folder, so no journal can be made beside it)."""
    from fsdp_orch.record.index import open_index

    a_job(home)
    with open_index(str(home)) as index:
        index.ingest()
    (home / "jobs.db").chmod(0o400)


def unreadable_events(cwd: Path, home: Path) -> None:
    run_dir = a_job(home)
    for path in (run_dir / "events").iterdir():
        path.chmod(0)


def events_folder_a_file(cwd: Path, home: Path) -> None:
    run_dir = a_job(home, "def456")
    import shutil

    shutil.rmtree(run_dir / "events")
    (run_dir / "events").write_text("x")


GARBAGE = b"this is not an SQLite database at all\n" * 40
HOME_READERS = [("status",), ("status", "--json"), ("status", "abc"), ("cancel", "abc"),
                ("events", "abc"), ("logs", "abc"), ("report", "abc"),
                ("metrics", "--textfile", ".")]
for argv in HOME_READERS:
    tag = "-".join(a.strip("-") for a in argv if a != ".")
    bad(f"home-runs-a-file-{tag}", ("runs", "a folder"), argv=argv, home={"runs": "x"})
    bad(f"home-db-a-folder-{tag}", ("jobs.db", "a file"), argv=argv, home={"jobs.db/x": "x"})
    if len(argv) > 1 and not argv[1].startswith("-"):  # a job id: none is known
        bad(f"home-db-garbage-{tag}", ("no job with id 'abc'",), argv=argv,
            home={"jobs.db": GARBAGE})
    else:  # a damaged index is left be by a command that only looks, and read around
        good(f"home-db-garbage-{tag}", argv=argv, home={"jobs.db": GARBAGE})
bad("home-runs-a-file-submit", ("runs", "a folder"), argv=("submit", "job.yaml", "--cluster",
                                                          "local"),
    home={"runs": "x"}, files=JOB_FILES)
bad("home-runs-a-file-schedule-list", ("runs", "a folder"), argv=("schedule", "list"),
    home={"runs": "x"})
bad("home-schedules-a-file", ("schedules", "a folder"), argv=("schedule", "list"),
    home={"schedules": "x"})
CASES.append(Case("home-db-read-only-cancel", ("cancel", "abc123"), outcome=SAFE,
                  setup=read_only_db))
good("home-db-read-only-status", argv=("status",), setup=read_only_db)
good("home-db-read-only-status-id", argv=("status", "abc123", "--json"), setup=read_only_db)
good("home-db-read-only-events", argv=("events", "abc123"), setup=read_only_db)
good("home-db-zero-bytes-status", argv=("status",), home={"jobs.db": b""})
good("home-unreadable-events-status", argv=("status",), setup=unreadable_events)
good("home-events-folder-a-file-status", argv=("status",), setup=events_folder_a_file)
CASES.append(Case("home-unreadable-events-events", ("events", "abc123"), outcome=SAFE,
                  setup=unreadable_events))
good("home-garbage-event-lines-status", argv=("status",),
     home={"runs/abc123/events/submit-x.jsonl": "not json\n[1,2]\n\"s\"\n{}\n"})


def _check_ids() -> None:
    ids = [c.id for c in CASES]
    dupes = {i for i in ids if ids.count(i) > 1}
    assert not dupes, dupes


_check_ids()
if os.environ.get("BAD_INPUT_CORPUS_COUNT"):  # pragma: no cover - a look at the table's size
    print(len(CASES), sum(c.outcome == REFUSED for c in CASES))

# --- the kubernetes kind (issue 66) ---------------------------------------------------------------
# Its rows, K8S_CASES, join CASES (the kind is in backends/registry.KIND_MODULES).
K8S = ("kind: kubernetes\nimage: busybox\nshared_dir: /srv/runs\n"
       "volumes: [{name: runs, mount_path: /srv/runs, persistent_volume_claim: runs}, "
       "{name: code, mount_path: /app, persistent_volume_claim: code}]\n"
       "run_volume: runs\nworkdir: /app\n")
K8S_VOLUME = "{name: runs, mount_path: /srv/runs"
K8S_CASES: list[Case] = []


def k8s_case(id: str, yaml: str, fld: str, *expect: str, job_extra: str = "",
             where: str = "mine.yaml", outcome: str = REFUSED) -> None:
    """A kubernetes profile whose ``yaml`` replaces the base's line of the same key."""
    keys = {line.partition(":")[0] for line in yaml.splitlines()}
    base = "".join(line + "\n" for line in K8S.splitlines() if line.partition(":")[0] not in keys)
    K8S_CASES.append(Case(f"profile-kubernetes-{id}", ("render", "job.yaml", "--cluster", "mine"),
                          expect=(where, f"{fld}:", *expect) if outcome == REFUSED else (),
                          outcome=outcome, files={"job.yaml": OK_JOB + job_extra,
                                                  "clusters/mine.yaml": base + yaml + "\n"}))


for id, yaml, fld, *expect in [
        ("namespace-upper", "namespace: Prod", "namespace", "RFC 1123"),
        ("namespace-dot", "namespace: ml.team", "namespace", "RFC 1123"),
        ("namespace-long", "namespace: " + "a" * 64, "namespace", "at most 63"),
        ("namespace-dash-end", "namespace: team-", "namespace", "RFC 1123"),
        ("image-space", "image: 'my image'", "image", "image reference"),
        ("image-upper", "image: nvidia/PyTorch:25.01", "image", "lower case"),
        ("image-newline", 'image: "busybox\\nx"', "image", "image reference"),
        ("pull-policy", "image_pull_policy: Sometimes", "image_pull_policy",
         "'Always', 'IfNotPresent' or 'Never'"),
        ("pull-secret-upper", "image_pull_secrets: [Creds]", "image_pull_secrets.0", "RFC 1123"),
        ("cpu-words", "resources: {cpu: lots}", "resources.cpu", "Kubernetes quantity"),
        ("cpu-zero", "resources: {cpu: 0}", "resources.cpu", "above 0"),
        ("cpu-negative", "resources: {cpu: -1}", "resources.cpu", "Kubernetes quantity"),
        ("cpu-yes", "resources: {cpu: yes}", "resources.cpu", "Kubernetes quantity"),
        ("cpu-unit", "resources: {cpu: 2 cores}", "resources.cpu", "Kubernetes quantity"),
        ("memory-milli", "resources: {memory: 64m}", "resources.memory", "m is milli"),
        ("memory-gb", "resources: {memory: 64GB}", "resources.memory", "Kubernetes quantity"),
        ("memory-arabic", f"resources: {{memory: '{ARABIC_9464}Mi'}}", "resources.memory",
         "Kubernetes quantity"),
        ("gpus-negative", "resources: {gpus: -1}", "resources.gpus", "greater than or equal to 0"),
        ("gpus-huge", "resources: {gpus: 1000000000000}", "resources.gpus", "at most 1024"),
        ("resources-unknown", "resources: {gpu: 1}", "resources.gpu", "unknown field"),
        ("volume-both", f"volumes: [{K8S_VOLUME}, persistent_volume_claim: a, host_path: /x}}]",
         "volumes.0", "exactly one of persistent_volume_claim"),
        ("volume-neither", f"volumes: [{K8S_VOLUME}}}]", "volumes.0",
         "exactly one of persistent_volume_claim"),
        ("volume-relative", "volumes: [{name: runs, mount_path: srv, host_path: /srv}]",
         "volumes.0.mount_path", "absolute path"),
        ("volume-name-upper", "volumes: [{name: Runs, mount_path: /srv/runs, host_path: /x}]",
         "volumes.0.name", "RFC 1123"),
        ("volume-claim-space", f"volumes: [{K8S_VOLUME}, persistent_volume_claim: 'my claim'}}]",
         "volumes.0.persistent_volume_claim", "RFC 1123"),
        ("shm-milli", "shm_size: 512m", "shm_size", "m is milli"),
        ("shm-volume-name", f"volumes: [{K8S_VOLUME}, host_path: /a}}, {{name: x, "
         "mount_path: /dev/shm, host_path: /dev/shm}]", "volumes", "shm_size"),
        ("volume-twice", f"volumes: [{K8S_VOLUME}, host_path: /a}}, {K8S_VOLUME}, host_path: /b}}]",
         "volumes", "twice"),
        ("run-volume-unknown", "run_volume: data", "run_volume", "one of volumes"),
        ("run-volume-read-only", f"volumes: [{K8S_VOLUME}, host_path: /a, read_only: true}}]",
         "run_volume", "writable"),
        ("shared-dir-off-volume", "shared_dir: /elsewhere", "run_volume", "under its mount_path"),
        ("shared-dir-none", "shared_dir: null", "shared_dir", "run folders"),
        ("workdir-relative", "workdir: app", "workdir", "absolute path"),
        ("node-selector-key", "node_selector: {'gpu type': h100}", "node_selector", "label key"),
        ("node-selector-value", "node_selector: {gpu: 'h 100'}", "node_selector", "label value"),
        ("toleration-exists-value", "tolerations: [{key: a, operator: Exists, value: b}]",
         "tolerations.0", "no value"),
        ("toleration-effect", "tolerations: [{key: a, effect: NoRun}]", "tolerations.0.effect",
         "'NoSchedule'"),
        ("toleration-seconds", "tolerations: [{key: a, effect: NoSchedule, "
         "toleration_seconds: 5}]", "tolerations.0", "NoExecute"),
        ("toleration-no-key", "tolerations: [{value: b}]", "tolerations.0", "Exists"),
        ("affinity-list", "affinity: [a]", "affinity", "dictionary"),
        ("affinity-misspelt", "affinity: {nodeAffinty: {}}", "affinity", "nodeAffinity"),
        ("service-account-upper", "service_account: Trainer", "service_account", "RFC 1123"),
        ("priority-class-space", "priority_class: 'very high'", "priority_class", "RFC 1123"),
        ("labels-ours", "labels: {fsdp-orch/job-id: x}", "labels", "reserved"),
        ("labels-kubernetes", "labels: {kubernetes.io/arch: x}", "labels", "reserved"),
        ("labels-managed-by", "labels: {app.kubernetes.io/managed-by: me}", "labels", "reserved"),
        ("labels-value", "labels: {team: 'ml team'}", "labels", "label value"),
        ("labels-number", "labels: {team: 5}", "labels.team", "string"),
        ("secret-env-name", "env_from_secrets: [{env: 1X, secret: s, key: k}]",
         "env_from_secrets.0.env", "not a valid shell name"),
        ("secret-env-secret", "env_from_secrets: [{env: X, secret: S, key: k}]",
         "env_from_secrets.0.secret", "RFC 1123"),
        ("secret-env-key", "env_from_secrets: [{env: X, secret: s, key: 'a/b'}]",
         "env_from_secrets.0.key", "key of a Kubernetes Secret"),
        ("secret-env-twice", "env_from_secrets: [{env: X, secret: s, key: k}, "
         "{env: X, secret: t, key: k}]", "env_from_secrets", "twice"),
        ("secret-env-ours", "env_from_secrets: [{env: FSDP_ORCH_X, secret: s, key: k}]",
         "env_from_secrets.0.env", "fsdp-orch's own"),
        ("secret-env-and-env", "env: {X: a}\nenv_from_secrets: [{env: X, secret: s, key: k}]",
         "env_from_secrets", "in both"),
        ("procs-zero", "procs_per_node: 0", "procs_per_node", "greater than 0"),
        ("device-tpu", "device: tpu", "device", "'cpu' or 'cuda'"),
        ("rdzv-host-space", "rdzv_host: 'a b'", "rdzv_host", "host name or IP address"),
        ("supervisor-address-space", "supervisor_address: 'a;b'", "supervisor_address",
         "host name or IP address"),
        ("unschedulable-timeout-zero", "unschedulable_timeout: 0", "unschedulable_timeout",
         "greater than 0"),
        ("unschedulable-timeout-huge", f"unschedulable_timeout: {BIG}", "unschedulable_timeout",
         "at most"),
        ("run-as-user-negative", "run_as_user: -1", "run_as_user", "greater than or equal to 0"),
        ("kubeconfig-empty", "kubeconfig: ''", "kubeconfig", "file's path"),
        ("context-newline", 'context: "a\\nb"', "context", "line feed"),
        ("host-network-maybe", "host_network: maybe", "host_network", "bool"),
        ("jobset-maybe", "use_jobset: maybe", "use_jobset", "bool"),
        ("image-missing", "kubeconfig: ~/.kube/config\nimage: null", "image", "string")]:
    k8s_case(id, yaml, fld, *expect)

# what the job asks of the kind: refused naming the job's field
k8s_case("job-elastic", "", "nodes", "elastic", job_extra="nodes: 1-2\n", where="job.yaml")
k8s_case("job-checkpoint-off-volumes", "", "checkpoint.dir", "none of the cluster's volumes",
         job_extra="checkpoint: {dir: /scratch/ckpt}\n", where="job.yaml")
k8s_case("job-env-and-secret-env", "env_from_secrets: [{env: HF_TOKEN, secret: s, key: k}]",
         "env", "env_from_secrets", job_extra="env: {HF_TOKEN: x}\n", where="job.yaml")
k8s_case("job-folder-off-volumes", "workdir: null", "workdir", "none of the cluster's volumes",
         where="job.yaml")
# legitimate edge values
for id, yaml in [("cpu-fraction", "resources: {cpu: 0.5, memory: 1Mi}"),
                 ("cpu-exponent", "resources: {cpu: 1e3, memory: 1.5Gi, gpus: 8}"),
                 ("namespace-63", "namespace: " + "a" * 63),
                 ("labels-app", "labels: {app.kubernetes.io/name: trainer, team: ''}"),
                 ("digest", "image: registry:5000/team/train@sha256:" + "a" * 64),
                 ("jobset-host-network", "use_jobset: true\nhost_network: true\n"
                  "rdzv_host: 127.0.0.1"),
                 ("resume-never-off-volumes", "volumes: [{name: runs, mount_path: /srv/runs, "
                  "host_path: /srv/runs}]")]:
    k8s_case(f"ok-{id}", yaml, "", outcome=ACCEPTED,
             job_extra="checkpoint: {resume: never}\n" if id.startswith("resume") else "")

CASES.extend(K8S_CASES)
_check_ids()
