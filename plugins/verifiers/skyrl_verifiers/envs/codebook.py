"""``skyrl-codebook``: tool-using. Each word has a made-up code only the ``codebook`` MCP tool server knows
(verifiers starts one per rollout; the model sees its tool as ``codebook_lookup``); the reply gives the code
inside ``<answer></answer>``. Rewards: ``found`` (weight 1: the word's code is in the last reply), metric
``lookups`` (tool results in the trace). Running this module starts the tool server (verifiers launches it as
``python -m skyrl_verifiers.envs.codebook``).
"""

from __future__ import annotations

import verifiers.v1 as vf

CODES: dict[str, str] = {"river": "K7-QX", "lantern": "M2-ZV", "orbit": "T9-WB", "meadow": "R4-JN",
                         "copper": "H6-LC", "pebble": "D3-YS", "harbor": "F8-GU", "violet": "P5-AE"}
SPLITS = {"train": ("river", "lantern", "orbit", "meadow", "copper"), "test": ("pebble", "harbor", "violet")}


class CodebookToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "codebook"

    @vf.tool
    def lookup(self, word: str) -> str:
        """The code of a word in the codebook."""
        return CODES.get(word.strip().lower(), "no such word in the codebook")


class CodebookTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class CodebookData(vf.TaskData):
    answer: str
    """The word's code."""


class CodebookTask(vf.Task[CodebookData, vf.State, CodebookTaskConfig]):
    @classmethod
    def toolsets(cls, config: CodebookTaskConfig) -> list[vf.Toolset]:
        return [CodebookToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def found(self, trace: vf.Trace) -> float:
        return float(self.data.answer.lower() in (trace.last_reply or "").lower())

    @vf.metric
    async def lookups(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))


class CodebookConfig(vf.TasksetConfig):
    task: CodebookTaskConfig = CodebookTaskConfig()
    dataset_split: str = "train"
    """``train`` (five words) or ``test`` (three others)."""


class CodebookTaskset(vf.Taskset[CodebookTask, CodebookConfig]):
    def load(self) -> list[CodebookTask]:
        if self.config.dataset_split not in SPLITS:
            raise ValueError(f"skyrl-codebook: dataset_split {self.config.dataset_split!r}; valid: {', '.join(SPLITS)}")
        return [CodebookTask(CodebookData(prompt=f"Look up the code of the word \"{word}\" with the codebook_lookup "
                                                 f"tool, then reply with the code inside <answer></answer> tags.",
                                          answer=CODES[word]), self.config.task)
                for word in SPLITS[self.config.dataset_split]]


__all__ = ["CodebookTaskset"]

if __name__ == "__main__":
    CodebookToolset.run()
