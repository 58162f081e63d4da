"""Units: a unit written after an answer's value must be the gold's or the problem's, or convert to the same value.

`split_unit(answer)` takes a trailing unit of `UNITS` off an answer (`540 cm`, `4\\,\\text{in/s}`, `30 \\text{
minutes}`, `12 square feet`); `unit_scale(unit, gold, problem)` is the factor that turns the answer's value into
the gold's unit: the gold's own unit of the same kind, else the last unit of that kind the problem names (its
question's). So `540 cm` for a gold of 540 (m) is 5.4 and scores 0, `54000 cm` scores 1; feet per second are not
inches per second; a unit of a kind neither the gold nor the problem names scores 0 (None). Only the units of
`UNITS` are converted; other words after a value are left to `answer.py` (the problem's nouns: "18 eggs").
"""

from __future__ import annotations

import re
from fractions import Fraction

# name -> (kind, factor to the kind's base unit)
_LENGTH = {"mm": Fraction(1, 1000), "cm": Fraction(1, 100), "m": Fraction(1), "km": Fraction(1000),
           "in": Fraction(254, 10000), "ft": Fraction(3048, 10000), "yd": Fraction(9144, 10000),
           "mi": Fraction(1609344, 1000)}  # fmt: skip
_TIME = {"s": Fraction(1), "min": Fraction(60), "h": Fraction(3600), "day": Fraction(86400), "week": Fraction(604800)}
_MASS = {"mg": Fraction(1, 1000), "g": Fraction(1), "kg": Fraction(1000), "lb": Fraction(45359237, 100000),
         "oz": Fraction(45359237, 1600000)}  # fmt: skip
_VOLUME = {"ml": Fraction(1, 1000), "l": Fraction(1), "gal": Fraction(3785411784, 10**9),
           "qt": Fraction(3785411784, 4 * 10**9), "pt": Fraction(3785411784, 8 * 10**9),
           "cup": Fraction(3785411784, 16 * 10**9)}  # fmt: skip
_MONEY = {"cent": Fraction(1, 100), "dollar": Fraction(1)}
_CALENDAR = {"month": Fraction(1), "year": Fraction(12)}
UNITS = {
    name: (kind, factor)
    for kind, table in (("length", _LENGTH), ("time", _TIME), ("mass", _MASS), ("volume", _VOLUME),
                        ("money", _MONEY), ("calendar", _CALENDAR))
    for name, factor in table.items()
}  # fmt: skip
# Spellings of each unit (plurals are read by dropping a final "s" or "es").
_SPELLINGS = {
    "millimeter": "mm", "millimetre": "mm", "centimeter": "cm", "centimetre": "cm", "meter": "m", "metre": "m",
    "kilometer": "km", "kilometre": "km", "inch": "in", "inche": "in", "foot": "ft", "feet": "ft", "yard": "yd",
    "mile": "mi", "sec": "s", "second": "s", "minute": "min", "hour": "h", "hr": "h", "days": "day",
    "wk": "week", "milligram": "mg", "gram": "g", "kilogram": "kg", "pound": "lb", "lbs": "lb", "ounce": "oz",
    "milliliter": "ml", "millilitre": "ml", "liter": "l", "litre": "l", "gallon": "gal", "quart": "qt",
    "pint": "pt", "cents": "cent", "dollars": "dollar", "months": "month", "years": "year", "yr": "year",
}  # fmt: skip
_RATES = {"mph": ("mi", "h"), "kph": ("km", "h"), "kmh": ("km", "h")}
# Abbreviations that are also words or letters: a unit in a problem only right after a number ("5 m", "3 in").
_NEED_A_NUMBER = {"in", "m", "s", "h", "g", "l", "mi", "pt", "min", "second", "seconds", "sec", "cup", "cups"}
_POWERS = {"square": 2, "sq": 2, "cubic": 3, "cu": 3}
_TEXT = re.compile(r"\\(?:text|textnormal|textbf|textit|mathrm|textrm|mbox|operatorname)\s*\{([^{}]*)\}")
# A number's end, then a space and a word, or a rate's slash: "540 cm", "5/\text{day}", never "5m" or "18x".
_VALUE_END = re.compile(r"\d[^A-Za-z\s/]*(?=\s+[A-Za-z]|\s*/\s*[A-Za-z])")
_UNIT_CHARS = re.compile(r"[A-Za-z\s/^{}23.]+")


def _unit_name(word: str) -> str | None:
    lower = word.lower()
    for candidate in (
        lower,
        lower[:-1] if lower.endswith("s") else lower,
        lower[:-2] if lower.endswith("es") else lower,
    ):
        if candidate in UNITS:
            return candidate
        if candidate in _SPELLINGS:
            return _SPELLINGS[candidate]
    return None


def read_unit(words: str) -> tuple[tuple, Fraction] | None:
    """(kind signature, factor to base units) of a unit expression ("cm", "inches per second", "in/s", "sq ft",
    "m^2"), or None when any word is not a unit of `UNITS`."""
    tokens = re.findall(r"[A-Za-z]+|/|\^\s*\{?[23]\}?", words)
    if not tokens:
        return None
    kinds: dict[str, int] = {}
    factor, sign, power = Fraction(1), 1, 1
    seen_unit, last_kind, last_factor = False, "", Fraction(1)
    for token in tokens:
        lower = token.lower()
        if lower in ("per", "/"):
            sign, seen_unit = -1, False
            continue
        if lower in _POWERS:
            power = _POWERS[lower]
            continue
        if token.startswith("^"):
            if not seen_unit:
                return None
            extra = int(re.sub(r"\D", "", token)) - 1
            kinds[last_kind] += sign * extra
            factor *= last_factor ** (sign * extra)
            continue
        if lower in _RATES:
            if seen_unit or sign < 0:
                return None
            seen_unit = True
            top, bottom = _RATES[lower]
            for name, direction in ((top, 1), (bottom, -1)):
                kind, unit_factor = UNITS[name]
                kinds[kind] = kinds.get(kind, 0) + direction
                factor *= unit_factor**direction
            continue
        name = _unit_name(token)
        if name is None or seen_unit:
            return None  # a word that is no unit, or a second unit without "per" ("hours in total")
        last_kind, last_factor = UNITS[name]
        kinds[last_kind] = kinds.get(last_kind, 0) + sign * power
        factor *= last_factor ** (sign * power)
        power, seen_unit = 1, True
    signature = tuple(sorted((kind, exponent) for kind, exponent in kinds.items() if exponent))
    return (signature, factor) if signature else None


def split_unit(answer: str) -> tuple[str, tuple[tuple, Fraction] | None]:
    """(the value, its unit) of an answer ending in a unit of `UNITS`; (answer, None) when it ends in none."""
    if not re.search(r"[A-Za-z]", answer):
        return answer, None
    flat = _TEXT.sub(r" \1 ", answer).replace("\\,", " ").replace("\\ ", " ").replace("~", " ")
    ends = list(_VALUE_END.finditer(flat))
    if not ends:
        return answer, None  # "18x", "5m": a letter glued to a number is part of its value
    value, unit_text = flat[: ends[-1].end()], flat[ends[-1].end() :]
    if not _UNIT_CHARS.fullmatch(unit_text):
        return answer, None
    unit = read_unit(unit_text.rstrip(" ."))
    if unit is None:
        return answer, None
    return value.strip(), unit


def problem_units(text: str) -> list[tuple[tuple, Fraction]]:
    """Every unit the text names, in order: unit words and rates ("60 miles per hour", "per day", "in/s", "mph"),
    `$` as dollars, `¢` as cents. A word that is also an English word or a letter ("in", "m", "second") counts only
    right after a number ("5 m", "3 in")."""
    flat = _TEXT.sub(r" \1 ", text).replace("\\$", " $ ")
    tokens = re.findall(r"\$\s*\d|¢|\d+(?:\.\d+)?|[A-Za-z]+|/", flat)
    found, index = [], 0
    while index < len(tokens):
        token = tokens[index]
        if token.startswith("$") or token == "¢":
            found.append(((("money", 1),), Fraction(1) if token != "¢" else Fraction(1, 100)))
            index += 1
            continue
        lower = token.lower()
        after_number = index > 0 and tokens[index - 1][0].isdigit()
        if (
            lower in _NEED_A_NUMBER
            and not after_number
            or not (_unit_name(token) or lower in _RATES or lower in _POWERS or lower in ("per", "/"))
        ):
            index += 1
            continue
        for length in range(min(5, len(tokens) - index), 0, -1):  # the longest unit expression that starts here
            unit = read_unit(" ".join(tokens[index : index + length]))
            if unit is not None:
                found.append(unit)
                index += length
                break
        else:
            index += 1
    return found


def unit_scale(unit: tuple[tuple, Fraction], gold: str, problem: str | None) -> Fraction | None:
    """The factor from the answer's unit to the gold's (the module docstring); None when neither the gold nor the
    problem names a unit of its kind. The problem's unit is the last of its kind named in its question (the last
    sentence that ends with "?"), else in the whole problem. Without a problem text (a reward called with no
    `prompts` and no problem column) only the gold's unit can be checked: any other unit stands as written."""
    signature, factor = unit
    _, gold_unit = split_unit(gold)
    if gold_unit is not None and gold_unit[0] == signature:
        return factor / gold_unit[1]
    if problem is None:
        return Fraction(1)
    named = [found for found in problem_units(problem or "") if found[0] == signature]
    if not named:
        return None
    asked = [found for found in problem_units(_question(problem or "")) if found[0] == signature]
    return factor / (asked or named)[-1][1]


def _question(problem: str) -> str:
    """The problem's last sentence that asks ("How many meters are left?"): its units are the answer's."""
    questions = re.findall(r"[^.?!]*\?", problem)
    return questions[-1] if questions else ""
