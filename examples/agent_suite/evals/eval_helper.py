"""The agent suite: a model that must use a calculator tool. Fake models: no network, no keys.

``fake/tooluser`` calls the tool and answers with its result; ``fake/echo`` answers
without calling it, and is wrong. The adapter runs the standard call -> tool -> call loop
with ``run_tools``; the scorer checks the final answer and that the tool was used.
"""

from pathlib import Path

import agent_evals as ae


def multiply(a: float, b: float) -> float:
    """Multiply two numbers: a times b."""
    return a * b


class Calculator(ae.Adapter):
    uses_tools = True  # a contender whose provider cannot call tools is refused by name
    SYSTEM = "You answer arithmetic questions. Use the multiply tool, then answer with the number alone."

    def call(self, case, model):
        messages = [{"role": "system", "content": self.SYSTEM}, {"role": "user", "content": case.input}]
        run = ae.run_tools(model, messages, {"multiply": multiply})  # at most model.max_turns calls
        if not run.finished:
            return ae.Reply(error=f"no answer after {run.turns} turns", transcript=run.transcript)
        try:
            answer = float(run.answer.strip())
        except ValueError:
            return ae.Reply(error=f"the answer is not a number: {run.answer[:60]!r}", transcript=run.transcript)
        tools = [call.name for call in run.calls]
        return ae.Reply(output={"answer": answer, "tools": tools}, raw=run.answer, transcript=run.transcript)


class Scorer(ae.Scorer):
    def metrics(self):
        return [
            ae.Metric("correct", "1 when the final answer is the expected number.", primary=True),
            ae.Metric("used_tool", "1 when the agent called the multiply tool."),
        ]

    def call(self, case, reply, context):
        correct = float(abs(reply.output["answer"] - case.expected["answer"]) < 1e-9)
        used = float("multiply" in reply.output["tools"])
        return ae.Score(value=correct, metrics={"correct": correct, "used_tool": used})


ae.configure(
    suite="agent",
    root=Path(__file__).parent,
    adapter=Calculator(),
    scorer=Scorer(),
    providers=[ae.FakeProvider()],
)
