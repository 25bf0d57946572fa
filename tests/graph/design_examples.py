"""The wire examples of the graph memory design, as JSON texts exactly as the
design shows them (events, hydrate requests, the configuration document)."""

from __future__ import annotations

COMPACTION_STARTING = """{
    "type": "compaction_starting",
    "loop_id": "loop_123",
    "iteration": 5,
    "utilization": 0.65
}"""

COMPACTION_COMPLETE = """{
    "type": "compaction_complete",
    "loop_id": "loop_123",
    "iteration": 5,
    "tokens_saved": 2500,
    "summary": "Discussed authentication..."
}"""

GC_COMPLETE = """{
    "type": "gc_complete",
    "loop_id": "loop_123",
    "iteration": 6
}"""

HYDRATE_PRE_TASK = """{
    "loop_id": "loop_123",
    "type": "pre_task",
    "task_description": "Implement user authentication"
}"""

HYDRATE_POST_COMPACTION = """{
    "loop_id": "loop_123",
    "type": "post_compaction"
}"""

CONFIG = """{
    "extraction": {
        "llm_assisted": {
            "enabled": true,
            "model": "fast",
            "trigger_iteration_interval": 5,
            "trigger_context_threshold": 0.8,
            "max_tokens": 1000
        }
    },
    "hydration": {
        "pre_task": {
            "enabled": true,
            "max_context_tokens": 2000,
            "include_decisions": true,
            "include_files": true
        },
        "post_compaction": {
            "enabled": true,
            "reconstruct_from_checkpoint": true,
            "max_recovery_tokens": 1500
        }
    },
    "checkpoint": {
        "enabled": true,
        "storage_bucket": "AGENT_MEMORY_CHECKPOINTS",
        "retention_days": 7
    },
    "stream_name": "AGENT"
}"""
