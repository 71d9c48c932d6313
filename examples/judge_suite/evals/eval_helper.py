"""A judged suite, offline: an LLM judge (a fake one, lenient in a known way) grades two
fake contenders' capitals, and people's labels correct what it gets wrong.

The judge passes every right answer, and also a country's largest city given as its
capital (Sydney for Australia): the mistake the "sloppy" contender makes. So the judged
figures flatter sloppy; labels (agent-evals label, or the HTML report) show by how much.
"""

import json
import re

import agent_evals as ae

CAPITALS = {
    "Australia": ("Canberra", "Sydney"),
    "Brazil": ("Brasília", "São Paulo"),
    "Canada": ("Ottawa", "Toronto"),
    "Morocco": ("Rabat", "Casablanca"),
    "Nigeria": ("Abuja", "Lagos"),
    "Pakistan": ("Islamabad", "Karachi"),
    "Switzerland": ("Bern", "Zurich"),
    "Turkey": ("Ankara", "Istanbul"),
    "Vietnam": ("Hanoi", "Ho Chi Minh City"),
    "New Zealand": ("Wellington", "Auckland"),
    "France": ("Paris", "Marseille"),
    "Japan": ("Tokyo", "Yokohama"),
    "Kenya": ("Nairobi", "Mombasa"),
    "Peru": ("Lima", "Arequipa"),
    "Egypt": ("Cairo", "Alexandria"),
    "Norway": ("Oslo", "Bergen"),
}


def country(text: str) -> str:
    return re.search(r"capital of (.+?)\?", text).group(1)


def careful(system, user):  # right but for one slip
    name = country(user)
    return json.dumps({"capital": "Oslo" if name == "Peru" else CAPITALS[name][0]})


def sloppy(system, user):  # the largest city, for the first six countries
    name = country(user)
    right, largest = CAPITALS[name]
    return json.dumps({"capital": largest if list(CAPITALS).index(name) < 6 else right})


def judge(system, user):  # lenient: a country's largest city passes as its capital
    expected = json.loads(user.split("Expected answer:\n")[1].split("\n\nAnswer to grade:")[0])
    answer = json.loads(user.split("Answer to grade:\n")[1])
    largest = {right: big for right, big in CAPITALS.values()}.get(expected["capital"])
    verdict = "pass" if answer.get("capital") in (expected["capital"], largest) else "fail"
    return json.dumps({"verdict": verdict, "reasons": f"{answer.get('capital')} for {expected['capital']}"})


class Adapter(ae.Adapter):
    def call(self, case, model):
        completion = model.complete('Answer with a JSON object {"capital": ...}.', case.input)
        return ae.Reply(output=json.loads(completion.text), raw=completion.text, usage=completion.usage)


RUBRIC = "Pass when the answer names the country's capital city, as the expected answer does."


class Scorer(ae.Scorer):
    judge = ae.Judge(RUBRIC)

    def metrics(self):
        return [ae.Metric("correct", "The judge's verdict: the capital named.", primary=True, judged=True)]

    def call(self, case, reply, context):
        verdict, reasons = self.judge(case, reply, context)
        return ae.Score(value=verdict, metrics={"correct": verdict}, diagnostics={"judge": reasons})


ae.configure(
    suite="judged capitals",
    adapter=Adapter(),
    scorer=Scorer(),
    providers=[ae.FakeProvider({"careful": careful, "sloppy": sloppy, "judge": judge})],
)
