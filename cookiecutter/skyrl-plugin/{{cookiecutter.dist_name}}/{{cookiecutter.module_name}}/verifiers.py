"""The example verifier: reward 1 when the finish answer equals the true count."""

from skyrl_core import VerifierResult


def exact_count(trajectory, runtime, instance) -> VerifierResult:
    try:
        correct = int(str(trajectory.answer).strip()) == instance.data["answer"]
    except ValueError:
        correct = False
    return VerifierResult(reward=float(correct), metrics={"answer": trajectory.answer})
