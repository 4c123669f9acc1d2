"""Deep-research tasks: ``hotpotqa`` (the shipped HotpotQA dev rows; the paragraphs live on the local web, not in
the prompt) and ``qa_jsonl`` (any JSONL of questions and answers), with the ``deep_research`` instruction builder.

An instance's data: ``question``, ``answers`` (a list of accepted strings), and for HotpotQA ``type``, ``level``
and ``gold_titles`` (the supporting paragraphs' titles; never shown to the agent).
"""

from __future__ import annotations

import copy
import json

from skyrl_core import DataSpec, Instance, Task

from .corpus import CorpusError, hotpotqa_rows, jsonl_rows

SYSTEM_PROMPT = (
    "You answer questions by researching the web. The answer is not something you know: find it. "
    "Use `web_search` with short queries (names, titles) to find pages, `open_page` with a url from the results and "
    "a goal to read one, and call `finish` with a short answer (a name, a date, yes or no) once the pages "
    "support it.")


def build_instructions(instance: Instance, task: Task) -> list[dict]:
    """System and user messages for one question."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Question: {instance.data['question']}"}]


# One worked example for small models that do not call tools from a description alone. Its question is about a
# distractor paragraph of the corpus (Constantin Medien), not one of the dataset's questions.
FEWSHOT_DEMONSTRATION = (
    {"role": "user", "content": "Question: In which town is the media group Constantin Medien based?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "web_search", "arguments": json.dumps({"queries": "Constantin Medien"})}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": (
        '## "Constantin Medien"\n1. Constantin Medien - http://127.0.0.1/wiki/Constantin_Medien\n'
        "   Constantin Medien AG (formerly EM.Entertainment and EM.TV & Merchandising AG) is a German media group, "
        "based in Ismaning near Munich...")},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "finish", "arguments": json.dumps({"answer": "Ismaning"})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Finished with answer: Ismaning"},
)


FEWSHOT_ASK = "What should I search for?"


def build_instructions_fewshot(instance: Instance, task: Task) -> list[dict]:
    """The system message, one worked example (search, then finish with a short answer) and the question, each
    question followed by "What should I search for?". Measured on SmolLM2-135M (greedy, the first 8 questions,
    ``parser: research_codeblock``): without that line 0/8 first replies search (the model answers from memory,
    or jumps to the example's last step); with it 8/8 do."""
    demo = copy.deepcopy(FEWSHOT_DEMONSTRATION)
    demo[0]["content"] += f"\n{FEWSHOT_ASK}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, *demo,
            {"role": "user", "content": f"Question: {instance.data['question']}\n{FEWSHOT_ASK}"}]


def load_hotpotqa(spec: DataSpec) -> list[Instance]:
    """HotpotQA distractor rows: the shipped 80 dev rows, or ``data.path`` (a file in the same layout)."""
    rows = hotpotqa_rows(spec.path)
    return [Instance(id=str(r["id"]), data={"question": r["question"], "answers": [r["answer"]],
                                            "type": r.get("type"), "level": r.get("level"),
                                            "gold_titles": sorted(set(r.get("supporting_facts", {}).get("title", [])))})
            for r in rows]


def load_qa_jsonl(spec: DataSpec) -> list[Instance]:
    """A JSONL file (``data.path``) of ``{"question": str, "answer": str | [str], "id"?: str}`` rows (``answers``
    is accepted for ``answer``). Raises CorpusError naming the file and line of a bad row."""
    if not spec.path:
        raise CorpusError("task qa_jsonl needs data.path: a JSONL file of {question, answer} rows")
    out = []
    for n, row in jsonl_rows(spec.path, "qa_jsonl file"):
        answers = row.get("answers", row.get("answer"))
        answers = [answers] if isinstance(answers, str) else answers
        if not isinstance(row.get("question"), str) or not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise CorpusError(f"{spec.path}:{n}: each row needs a string 'question' and an 'answer' (string or list of "
                              "strings)")
        out.append(Instance(id=str(row.get("id", n)), data={"question": row["question"], "answers": list(answers)}))
    return out


TOOLS = ("web_search", "open_page", "finish")

hotpotqa_task = Task(
    name="hotpotqa",
    description="HotpotQA multi-hop questions (80 dev rows, CC BY-SA 4.0) answered by searching a local web of "
                "all their context paragraphs; reward = exact match",
    load=load_hotpotqa,
    instruction_builder="deep_research",
    tools=TOOLS,
    verifier="qa_exact_match",
    runtime="web",
    default_data=DataSpec(split="dev"),
)

qa_jsonl_task = Task(
    name="qa_jsonl",
    description="Questions and answers from a JSONL file (data.path), answered with search and open_page; "
                "reward = exact match",
    load=load_qa_jsonl,
    instruction_builder="deep_research",
    tools=TOOLS,
    verifier="qa_exact_match",
    runtime="web",
)
