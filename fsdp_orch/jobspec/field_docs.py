"""What each field of a job file and of a cluster profile is for, in a line or two: the one source
of the descriptions that ``fsdp-orch schema job|profile`` gives editors and that
docs/reference/fields.md shows (scripts/gen_reference.py). Keyed by the model's name (its JSON
Schema title) and the field's; ``ProfileBase`` holds what every kind's profile has. Pure data:
imports nothing, so ``fsdp-orch schema`` stays fast and the CLI free of torch.

tests/unit/test_schema_descriptions.py fails when a field has no description here, or when one
here names a field the models no longer have."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_ARGS_PLACEHOLDERS = "{checkpoint} (its path) and {step} (its step) are filled in"

FIELD_DOCS: dict[str, dict[str, str]] = {
    "JobSpec": {
        "name": "The job's name, shown by status; any text (quoted wherever it reaches a shell).",
        "script": "The Python file to run on every rank. Exactly one of script, module or "
                  "command.",
        "module": "A Python module to run as `python -m MODULE`. Exactly one of script, module "
                  "or command.",
        "command": "A program and its arguments (a list, or one string split as a shell would), "
                   "run as it is. Exactly one of script, module or command.",
        "args": "Arguments passed to the script, module or command: literal strings, never "
                "interpreted by a shell.",
        "launcher": "What starts the ranks: torchrun (default), accelerate (accelerate launch "
                    "with a config written from fsdp:), python (the script starts its own "
                    "workers, one process per node) or xla (TPU).",
        "nodes": "How many nodes the job runs on, or an elastic range MIN-MAX: up to MAX nodes, "
                 "going on with MIN or more after losing some.",
        "spare_nodes": "SLURM: nodes allocated beyond nodes, for the attempts after a node is "
                       "lost. Unset: the profile's spare_nodes.",
        "procs_per_node": "Processes (ranks) per node. Unset: the profile's (SLURM: "
                          "gpus_per_node; SSH: procs_per_node; else 1).",
        "env": "Environment variables exported on every node: a literal value, or "
               "{from_env: NAME} / {from_file: PATH} read at submit.",
        "workdir": "The folder the job runs in, relative to the job file's folder.",
        "accelerate_config": "An `accelerate config` YAML file whose FSDP keys fill fsdp: (what "
                             "job.yaml sets wins).",
        "fsdp": "FSDP options under accelerate's names (with or without the fsdp_ prefix), for "
                "scripts using fsdp_orch.runtime and for launcher: accelerate.",
        "checkpoint": "Where the job's checkpoints are, how often the runtime saves, and how an "
                      "unchanged script is told to resume.",
        "restart": "When and how often a failed attempt is restarted.",
        "watch": "How a hang, a lost node or a straggler is detected.",
        "launch": "How each attempt's ranks are started: warm standby, umask.",
        "notify": "Webhooks POSTed when the job's state changes or chosen events happen.",
        "fit": "What `fsdp-orch fit` needs to estimate each GPU's peak memory (the model, batch, "
               "sequence length, optimizer, LoRA); with it, submit checks the job fits first.",
    },
    "FsdpOptions": {
        "sharding_strategy": "How parameters, gradients and optimizer state are sharded "
                             "(accelerate's names, or its numbers 1-5).",
        "reshard_after_forward": "FSDP2: free the gathered parameters after the forward pass. "
                                 "Unset: as the sharding strategy implies.",
        "auto_wrap_policy": "Which modules become FSDP units: by transformer layer class, by "
                            "size (min_num_params), or none.",
        "transformer_layer_cls_to_wrap": "The layer classes wrapped one by one (a list, or one "
                                         "comma-separated string). Empty: the model's "
                                         "_no_split_modules.",
        "min_num_params": "With SIZE_BASED_WRAP: the fewest parameters a wrapped module holds.",
        "offload_params": "Keep parameters (and their gradients) in CPU memory between uses.",
        "mixed_precision": "Compute in bf16 or fp16, or no (full precision).",
        "state_dict_type": "How the runtime saves: sharded (DCP), or FULL_STATE_DICT, which also "
                           "writes a consolidated model at the end.",
        "backward_prefetch": "When the next FSDP unit's parameters are gathered in the backward "
                             "pass.",
        "forward_prefetch": "Gather the next FSDP unit's parameters ahead in the forward pass.",
        "cpu_ram_efficient_loading": "Load the pretrained weights on rank 0 only and broadcast "
                                     "them (accelerate).",
        "sync_module_states": "Broadcast rank 0's module states to every rank when wrapping.",
        "use_orig_params": "Keep the original parameters visible to the optimizer (FSDP2 always "
                           "does).",
        "activation_checkpointing": "Recompute activations in the backward pass instead of "
                                    "keeping them: less memory, more compute.",
        "version": "accelerate's fsdp_version (1 or 2); fsdp-orch's runtime always uses FSDP2.",
        "xla": "TPU: shard with torch_xla's FSDP (launcher: xla).",
        "xla_fsdp_settings": "TPU: options passed to torch_xla's FSDP as they are (plain YAML "
                             "values).",
        "xla_fsdp_grad_ckpt": "TPU: gradient checkpointing of each wrapped layer.",
        "xla_fsdp_v2": "On an XLA device: FSDPv2 through SPMD when true, "
                       "XlaFullyShardedDataParallel when false.",
    },
    "CheckpointPolicy": {
        "dir": "The checkpoint folder, relative to workdir; a glob takes every folder it matches "
               "(lightning_logs/version_*/checkpoints). Unset: checkpoints/<name> under workdir.",
        "file": "Instead of dir: one file per checkpoint (out/ckpt.pt, ckpt-*.pt, "
                "model_{step}.pt), relative to workdir; wildcards in any part, {step} marks the "
                "step's digits in the name.",
        "step_key": "With file: the key of the saved dict whose int is the checkpoint's step "
                    "(nanoGPT: iter_num), read without torch, where the name has none.",
        "interval": "Steps between the runtime's saves, or auto: chosen as it runs from the "
                    "measured step time, the save's cost and the time between failures.",
        "keep_last": "How many complete checkpoints the runtime keeps.",
        "keep_previous": "How many earlier runs that submit --fresh moved aside (into "
                         ".fsdp-orch-previous/ in the checkpoint folder) are kept; the oldest "
                         "beyond it are deleted at the next --fresh.",
        "resume": "Which checkpoint a new attempt starts from: auto (the latest complete one), "
                  "never, or a path to one.",
        "async_save": "Save in the background (DCP's async save): auto where that is safe and "
                      "worth it, true or false.",
        "auto_mtbf": "With interval: auto, the time between failures assumed until the job has "
                     "failed once (then the one observed is used).",
        "save_full_at_end": "Also write a consolidated full model at the end of training.",
        "resume_args": "Arguments appended to the script's when a complete checkpoint exists: "
                       f"how an unchanged script is told to resume; {_ARGS_PLACEHOLDERS}.",
        "init_args": "Arguments appended when the job starts from another job's checkpoint "
                     "(submit --init-from) and has none of its own yet; "
                     f"{_ARGS_PLACEHOLDERS}.",
    },
    "RestartPolicy": {
        "max_restarts": "A hard cap on restarts of any kind. Unset: none (crash_loop_attempts "
                        "stops a job that fails without progress).",
        "backoff": "The wait before a restart, counted from the failure's verdict.",
        "retry_on": "The failure categories that are restarted; any other ends the job FAILED.",
        "max_oom_restarts": "How often a CUDA out-of-memory failure is restarted at most.",
        "crash_loop_attempts": "Give up after this many failed attempts in a row without "
                               "progress (no new complete checkpoint, or no step further).",
    },
    "Backoff": {
        "initial": "The wait after an attempt that made progress (a duration: 10s, 1m, or "
                   "seconds).",
        "max": "The longest wait, however many failures in a row.",
        "multiplier": "How much the wait grows with each failure in a row without progress.",
        "jitter": "Up to this much is added at random to each wait.",
    },
    "Watch": {
        "heartbeat_timeout": "The hang window's ceiling, and the window itself with "
                             "hang_detection: fixed.",
        "startup_timeout": "How long start-up may take: imports, model load, restore and the "
                           "first step.",
        "collective_timeout": "The process group timeout (gloo/NCCL), applied to a script's "
                              "init_process_group when it passes none.",
        "hang_detection": "adaptive: the hang window follows the ranks' own step times, between "
                          "adaptive_min and heartbeat_timeout; fixed: heartbeat_timeout always.",
        "adaptive_multiplier": "adaptive: the window is this many times the 95th percentile of "
                               "the recent step times.",
        "adaptive_min": "adaptive: the window never drops below this.",
        "poll_interval": "How often the supervisor looks at the ranks' heartbeats.",
        "expect_ranks": "An attempt that exits 0 without starting a torch rank is a failure "
                        "(no_ranks_started). Unset: yes for script and module jobs, no for "
                        "command jobs.",
        "stragglers": "report: name a rank its peers keep waiting for; replace: also run the next "
                      "attempt without its node, from the next complete checkpoint, where the "
                      "kind can; off: do not look.",
        "node_timeout": "A node whose agent says nothing for this long is lost: its attempt ends "
                        "and the next runs without it where the kind can.",
    },
    "LaunchOptions": {
        "standby": "auto: each attempt's ranks start from a warm standby (torch already "
                   "imported) where the launch allows it; off: always cold.",
        "prepare_standby_after": "How long an attempt runs before the next attempt's standby is "
                                 "forked from its keeper.",
        "umask": "The umask of the job's own program, in octal and in quotes (\"0022\"). Unset: "
                 "the umask submit ran with. fsdp-orch's own files stay 0600/0700.",
    },
    "FitOptions": {
        "model": "A Hugging Face config (a config.json, or a model folder with one; never the "
                 "hub) or a Python factory package.module:function that returns the torch "
                 "module.",
        "batch_size": "Sequences in one micro-batch, per GPU.",
        "seq_len": "Tokens in each sequence.",
        "optimizer": "The optimizer whose state is counted.",
        "dtype": "The weights' dtype as the script loads them (torch_dtype).",
        "flash_attention": "Attention without the score matrix in memory (flash-attention 2, "
                           "SDPA's flash kernel).",
        "lora": "Train LoRA adapters (PEFT) instead of every weight.",
        "activation_checkpointing": "job: as fsdp.activation_checkpointing says; none; full "
                                    "(every layer); selective-layer (every checkpoint_every-th "
                                    "layer); selective-op (torchtitan's op policy).",
        "checkpoint_every": "With selective-layer: every how many layers one is checkpointed.",
        "activation_offload": "Saved activations kept in host memory between forward and "
                              "backward (torchtune's enable_activation_offloading).",
        "reduce_dtype": "Under mixed precision, the gradients' reduce dtype: param (FSDP's "
                        "default) or float32 (torchtitan's).",
        "loss": "full: the whole logits upcast to float32 (Hugging Face's loss); chunked: in "
                "loss_chunks pieces (torchtune's CEWithChunkedOutputLoss).",
        "loss_chunks": "With loss: chunked, how many pieces the sequence is cut into.",
        "packed": "Rows packed to seq_len tokens; the estimate takes every row full either way.",
        "optimizer_offload": "The optimizer's state alone in host memory (torchao's "
                             "CPUOffloadOptimizer).",
        "optimizer_in_backward": "Each parameter stepped as its gradient is made, and the "
                                 "gradient freed (torchtune's optimizer_in_bwd).",
        "shard_apart": "Modules, by name, wrapped in a fully_shard of their own (torchtune's "
                       "custom_sharded_layers).",
        "compile": "torch.compile: accepted and named as not modelled (the estimate is eager).",
    },
    "LoraOptions": {
        "r": "The adapters' rank.",
        "dropout": "PEFT's lora_dropout: the probability an adapter's input is zeroed.",
        "target_modules": "all-linear (every Linear but the output head), or the Linear "
                          "modules' names.",
        "quantize": "nf4: QLoRA, the base weights stored in 4 bits (bitsandbytes); no: as "
                    "loaded.",
        "quant_storage": "With nf4: the dtype the 4-bit weights are packed into, so that FSDP "
                         "can shard them.",
        "double_quant": "With nf4: quantize the quantization constants too.",
        "adapter_dtype": "The adapters' dtype: float32 (PEFT's) or the model's (torchtune's).",
        "quantize_modules": "With nf4: adapted (the adapted Linear layers, PEFT's) or all-linear "
                            "(every Linear but the output head).",
        "quant_constants": "With nf4: whole on every rank (bitsandbytes') or sharded with the "
                           "weights (torchao's NF4Tensor, torchtune's).",
    },
    "Webhook": {
        "url": "Where to POST: an http:// or https:// URL.",
        "when": "The states and events that are sent (also spelled on:). Default: SUCCEEDED, "
                "INCOMPLETE, FAILED, CANCELLED.",
        "format": "json: the job's status JSON; slack: a {\"text\": ...} message.",
        "retry_for": "How long after the change a failed delivery is retried.",
        "headers": "HTTP headers sent with each POST: a value, or {from_env: NAME} / "
                   "{from_file: PATH}.",
    },
    "SecretRef": {
        "from_env": "The name of an environment variable of the submitting process.",
        "from_file": "A file only its owner can read, as ssh wants of a private key.",
    },
    "ProfileBase": {
        "kind": "The kind of cluster this profile describes.",
        "description": "A line about the cluster, shown by `fsdp-orch clusters`.",
        "template": "A template file that replaces this kind's main template.",
        "python": "The Python that runs fsdp-orch's node side and the job on the nodes.",
        "env": "Environment variables for every job sent to this cluster: a value, or "
               "{from_env: NAME} / {from_file: PATH}.",
        "shared_dir": "An absolute folder the submit host and the nodes share (NFS, Lustre, "
                      "GPFS): run folders go to <shared_dir>/<user>/runs/<id>. Unset: "
                      "$FSDP_ORCH_HOME/runs, which must then be shared for multi-node kinds.",
        "notify": "Webhooks for every job sent to this cluster (before the job's own).",
        "gpu_memory": "Each GPU's memory (80GB), for fsdp-orch fit's verdict and submit's check.",
    },
    "LocalProfile": {
        "device": "auto (the GPUs when /dev/nvidia0 exists, with NCCL), cpu (gloo) or cuda.",
        "python": "The Python the job runs with. Default: the one running fsdp-orch.",
        "procs_per_node": "Processes on this machine. Unset: the job's procs_per_node, else 1.",
        "rdzv_host": "The address torchrun's rendezvous listens on.",
    },
    "SlurmProfile": {
        "python": "The Python on the compute nodes (with fsdp-orch[runtime] installed): the "
                  "supervisor in the allocation, the node agents and the ranks run on it. "
                  "Default: python3 on the nodes' PATH, once setup: has run.",
        "partition": "#SBATCH --partition.",
        "account": "#SBATCH --account.",
        "qos": "#SBATCH --qos.",
        "time": "The time limit, quoted: minutes (\"30\"), \"HH:MM:SS\" or \"D-HH:MM:SS\".",
        "gpus_per_node": "GPUs a node (--gres=gpu:N); also the ranks per node by default. 0: CPU "
                         "nodes (gloo).",
        "cpus_per_task": "#SBATCH --cpus-per-task.",
        "mem": "#SBATCH --mem (16G).",
        "constraint": "#SBATCH --constraint (a node feature, h100).",
        "setup": "Shell lines at the top of the batch script (module load, source a venv).",
        "sbatch_extra": "Other sbatch options by name ({exclusive: true, mail-type: END}).",
        "container": "A pyxis/enroot container the ranks run in.",
        "job_folder": "Not used; run folders go under shared_dir (or $FSDP_ORCH_HOME/runs).",
        "signal_delay": "Seconds before the time limit that USR2 asks the job for a checkpoint, "
                        "then requeues it.",
        "spare_nodes": "Nodes allocated beyond a job's nodes: a lost node is left out and the "
                       "next attempt runs on a spare in the same allocation (a job's own "
                       "spare_nodes wins).",
    },
    "SlurmContainer": {
        "image": "The image (nvcr.io/nvidia/pytorch:25.01-py3).",
        "mounts": "Mounts, SRC:DST.",
        "workdir": "The folder the ranks start in, inside the container.",
    },
    "SshProfile": {
        "device": "cuda (NCCL) or cpu (gloo).",
        "hosts": "The hosts, the first of which runs the rendezvous.",
        "venv": "A virtual environment on the hosts: python becomes <venv>/bin/python.",
        "shared_filesystem": "Whether the hosts see the job's folder at the same path. false: "
                             "the job is copied to each host's remote_workdir.",
        "remote_workdir": "Shared: the job's folder as the hosts see it. Not shared: required, "
                          "an absolute folder where each host keeps the job's copy and run "
                          "folders.",
        "host_key_policy": "strict: only keys already in known_hosts; accept-new: take a new "
                           "host's key on first use; warn: accept any (not recommended).",
        "known_hosts": "The known_hosts file host keys are checked against.",
        "procs_per_node": "Processes per host, unless the job says.",
        "rdzv_port": "The rendezvous port on the first host. Unset: one derived per job and "
                     "attempt.",
        "connect_timeout": "Seconds an SSH connection may take to open.",
    },
    "SshHost": {
        "address": "A host name or IP address.",
        "port": "The SSH port.",
        "user": "The user to log in as. Unset: as ssh decides (~/.ssh/config, your name).",
        "identity_file": "The private key to log in with.",
    },
    "TpuVmProfile": {
        "tpu_name": "The TPU VM's name.",
        "zone": "Its zone (us-central2-b).",
        "project": "Its Google Cloud project. Unset: gcloud's default.",
        "accelerator_type": "The TPU type (v4-8).",
        "runtime_version": "The TPU software version (tpu-ubuntu2204-base).",
        "spot": "Create it as a Spot VM (preemptible).",
        "num_workers": "The TPU VM's worker hosts.",
        "owns_vm": "fsdp-orch creates the TPU VM when there is none, and deletes and creates it "
                   "again when preempted. false: someone else owns it; fsdp-orch waits for READY.",
        "ready_timeout": "Seconds an attempt waits for the TPU VM to be READY.",
        "pjrt_device": "TPU: torch_xla on the TPU. CPU: workers with no TPU (torch_xla's CPU "
                       "client where installed, else plain CPU with gloo).",
        "remote_workdir": "An absolute folder on each worker's own disk: run folders go to "
                          "<remote_workdir>/runs/<id>.",
        "setup": "Shell lines at the top of every worker's node script.",
        "prepare": "Shell lines run once on every worker of a TPU VM not used yet.",
        "ssh_user": "The user on the workers. Unset: the local user, as gcloud does.",
        "ssh_key": "The private key to reach the workers (gcloud's).",
        "ssh_port": "The workers' SSH port.",
        "address": "Which of the workers' addresses to use: internal or external.",
        "known_hosts": "A known_hosts file the workers' keys are checked against. Unset: each "
                       "TPU VM's keys are taken on first use and kept for that VM.",
        "host_key_policy": "strict, accept-new (default) or warn, as for SSH hosts.",
        "connect_timeout": "Seconds an SSH connection may take to open.",
    },
    "KubernetesProfile": {
        "kubeconfig": "The kubeconfig file. Unset: $KUBECONFIG, else ~/.kube/config.",
        "context": "The kubeconfig's context. Unset: its current-context.",
        "namespace": "The namespace the job's objects are made in (RFC 1123).",
        "image": "The image every pod runs: python: in it has torch and fsdp-orch[runtime].",
        "image_pull_policy": "Always, IfNotPresent or Never. Unset: Kubernetes' default.",
        "image_pull_secrets": "Secrets (by name) the kubelet pulls the image with.",
        "resources": "What each pod asks for, as requests equal to limits.",
        "node_selector": "Node labels the pods must run on ({team: ml}).",
        "tolerations": "Taints the pods tolerate (snake case: toleration_seconds).",
        "affinity": "The pods' affinity, as Kubernetes spells it (nodeAffinity, podAffinity, "
                    "podAntiAffinity), passed through.",
        "volumes": "Volumes mounted in every pod: a persistent_volume_claim or a host_path each.",
        "shm_size": "A memory-backed /dev/shm of this size (a container's own is 64Mi); it counts "
                    "against resources.memory.",
        "run_volume": "The volume that holds shared_dir: the run folders, which the supervisor's "
                      "machine and the pods see at the same path.",
        "shared_dir": "The folder on run_volume that holds the run folders "
                      "(<shared_dir>/<user>/runs/<id>), at the same path on the supervisor's "
                      "machine and in the pods. Required.",
        "workdir": "Where the job's relative paths start in the pods (the image's copy of the "
                   "code). Unset: the job file's folder, which a volume must hold.",
        "service_account": "The pods' service account. Unset: none, and no token in the pods.",
        "priority_class": "The pods' PriorityClass.",
        "host_network": "Run the pods on their nodes' network.",
        "run_as_user": "The pods' user: the run folder's owner. Unset: the image's.",
        "run_as_group": "The pods' group. Unset: the image's.",
        "env_from_secrets": "Variables every pod reads from a Kubernetes Secret, by reference.",
        "procs_per_node": "Processes per pod, unless the job says. Unset: resources.gpus, else 1.",
        "device": "cuda (NCCL) or cpu (gloo). Unset: cuda when resources.gpus, else cpu.",
        "rdzv_host": "Node 0's address for the rendezvous (with host_network). Unset: pod 0's "
                     "name through the attempt's headless Service.",
        "supervisor_address": "The address the pods' node agents reach a supervisor beside the "
                              "CLI at. Unset: the supervisor's machine's IPv4 address on its "
                              "route to the API server.",
        "supervisor": "Where the job's supervisor runs: beside the CLI (runs: here), or in a pod "
                      "of its own (runs: cluster), for a job that must outlive the submitting "
                      "machine.",
        "use_jobset": "Make each attempt a JobSet (jobset.x-k8s.io) instead of an Indexed Job.",
        "unschedulable_timeout": "Seconds a pod may stay unschedulable before the job fails.",
        "labels": "More labels on every object (not fsdp-orch/*, managed-by or kubernetes.io/).",
    },
    "KubernetesResources": {
        "cpu": "CPUs per pod, a Kubernetes quantity (8, 500m).",
        "memory": "Memory per pod, a Kubernetes quantity (64Gi).",
        "gpus": "nvidia.com/gpu per pod; also the processes per pod by default.",
    },
    "KubernetesSupervisor": {
        "runs": "here: beside the CLI, on the submitting machine; cluster: in a pod of its own, "
                "made by a Job that Kubernetes restarts (each new pod re-attaches).",
        "service_account": "With runs: cluster, the pod's service account, bound to the Role of "
                           "docs/kubernetes.md: its token reaches the API server.",
        "cpu": "CPU the supervisor's pod requests (no limit).",
        "memory": "Memory the supervisor's pod requests, and its limit.",
        "restarts": "How many times Kubernetes restarts the supervisor's pod (its Job's "
                    "backoffLimit) before status says the job FAILED.",
        "api_server": "https://HOST:PORT where the supervisor's pod reaches the API server, for "
                      "a cluster whose `kubernetes` Service pods cannot reach. Unset: that "
                      "Service.",
    },
    "KubernetesVolume": {
        "name": "The volume's name (RFC 1123).",
        "mount_path": "Where every pod mounts it (absolute).",
        "persistent_volume_claim": "A PersistentVolumeClaim's name in the namespace.",
        "host_path": "A folder of the node (absolute); it must exist there.",
        "read_only": "Mount it read-only.",
    },
    "KubernetesToleration": {
        "key": "The taint's key. Unset: every taint (operator: Exists).",
        "operator": "Equal (the value too) or Exists (any value).",
        "value": "The taint's value, with operator: Equal.",
        "effect": "NoSchedule, PreferNoSchedule or NoExecute. Unset: any.",
        "toleration_seconds": "With NoExecute: seconds the pod stays after the taint appears.",
    },
    "KubernetesSecretEnv": {
        "env": "The variable's name.",
        "secret": "The Kubernetes Secret's name, in the namespace.",
        "key": "The key of the Secret's data.",
    },
}

PROFILE_BASE = "ProfileBase"


def field_doc(model: str, field: str) -> str | None:
    """The description of ``field`` of the model titled ``model``; None when there is none. A
    profile kind's field not its own is ``ProfileBase``'s."""
    found = FIELD_DOCS.get(model, {}).get(field)
    if found is None and model.endswith("Profile"):
        found = FIELD_DOCS[PROFILE_BASE].get(field)
    return found


def described(node: Any) -> Any:
    """A JSON Schema (pydantic's, as ``model_json_schema`` writes it) with a ``description`` on
    every property of every model in it that has one here, kept where pydantic gave one. Pure."""
    if isinstance(node, list):
        return [described(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: described(value) for key, value in node.items()}
    title, properties = node.get("title"), out.get("properties")
    if isinstance(title, str) and isinstance(properties, dict):
        for name, prop in properties.items():
            text = field_doc(title, name)
            if text is not None and isinstance(prop, dict) and "description" not in prop:
                prop["description"] = text
    return out
