#!/usr/bin/env python3
"""Writes the easy-facts workload and its oracle answer file.

    python3 data/easy-facts/make.py

Easy factual questions with short reference answers, written for
edgecloud (no external source): capitals, simple science, geography,
everyday facts. Each is graded `contains` (the reference word appears),
`exact` (the normalised reply is the reference) or `regex` (for answers
a model may write as a digit or a word).

The answer file is an ORACLE stand-in for a strong cloud model: it answers
every question with the reference answer itself. It measures what a
cascade can recover when the cloud is always right; it says nothing
about any real provider's accuracy.
"""
import json
from pathlib import Path

SYSTEM = "Answer with one or two words only."
MAX_TOKENS = 12

# (id, question, graded answer, grader, oracle reply)
C = "contains"
ITEMS = [
    ("capital-france", "What is the capital of France?", "Paris", C, "Paris"),
    ("capital-japan", "What is the capital of Japan?", "Tokyo", C, "Tokyo"),
    ("capital-italy", "What is the capital of Italy?", "Rome", C, "Rome"),
    ("capital-spain", "What is the capital of Spain?", "Madrid", C, "Madrid"),
    ("capital-germany", "What is the capital of Germany?", "Berlin", C, "Berlin"),
    ("capital-uk", "What is the capital of the United Kingdom?", "London", C, "London"),
    ("capital-russia", "What is the capital of Russia?", "Moscow", C, "Moscow"),
    ("capital-china", "What is the capital of China?", "Beijing", C, "Beijing"),
    ("capital-egypt", "What is the capital of Egypt?", "Cairo", C, "Cairo"),
    ("capital-canada", "What is the capital of Canada?", "Ottawa", C, "Ottawa"),
    ("capital-australia", "What is the capital of Australia?", "Canberra", C, "Canberra"),
    ("capital-brazil", "What is the capital of Brazil?", "Brasília|Brasilia", "regex", "Brasília"),
    ("capital-kenya", "What is the capital of Kenya?", "Nairobi", C, "Nairobi"),
    ("capital-norway", "What is the capital of Norway?", "Oslo", C, "Oslo"),
    ("capital-sweden", "What is the capital of Sweden?", "Stockholm", C, "Stockholm"),
    ("capital-greece", "What is the capital of Greece?", "Athens", C, "Athens"),
    ("capital-portugal", "What is the capital of Portugal?", "Lisbon", C, "Lisbon"),
    ("capital-ireland", "What is the capital of Ireland?", "Dublin", C, "Dublin"),
    ("capital-poland", "What is the capital of Poland?", "Warsaw", C, "Warsaw"),
    ("capital-austria", "What is the capital of Austria?", "Vienna", C, "Vienna"),
    ("capital-peru", "What is the capital of Peru?", "Lima", C, "Lima"),
    ("capital-argentina", "What is the capital of Argentina?", "Buenos Aires", C, "Buenos Aires"),
    ("capital-mexico", "What is the capital of Mexico?", "Mexico City", C, "Mexico City"),
    ("capital-india", "What is the capital of India?", "New Delhi|Delhi", "regex", "New Delhi"),
    ("capital-turkey", "What is the capital of Turkey?", "Ankara", C, "Ankara"),
    ("capital-thailand", "What is the capital of Thailand?", "Bangkok", C, "Bangkok"),
    ("capital-vietnam", "What is the capital of Vietnam?", "Hanoi", C, "Hanoi"),
    ("capital-southkorea", "What is the capital of South Korea?", "Seoul", C, "Seoul"),
    ("capital-finland", "What is the capital of Finland?", "Helsinki", C, "Helsinki"),
    ("capital-hungary", "What is the capital of Hungary?", "Budapest", C, "Budapest"),
    ("capital-nigeria", "What is the capital of Nigeria?", "Abuja", C, "Abuja"),
    ("capital-switzerland", "What is the capital of Switzerland?", "Bern", C, "Bern"),
    ("planet-red", "Which planet is known as the Red Planet?", "Mars", C, "Mars"),
    ("planet-largest", "What is the largest planet in our solar system?", "Jupiter", C, "Jupiter"),
    ("planet-closest", "Which planet is closest to the Sun?", "Mercury", C, "Mercury"),
    ("planet-rings", "Which planet is famous for its rings?", "Saturn", C, "Saturn"),
    ("planet-ours", "On which planet do we live?", "Earth", C, "Earth"),
    ("star-ours", "What is the star at the center of our solar system called?", "Sun", C, "The Sun"),
    ("moon-earth", "What is the name of Earth's natural satellite?", "Moon", C, "The Moon"),
    ("water-formula", "What is the chemical formula of water?", "H2O", C, "H2O"),
    ("gas-plants", "Which gas do plants absorb from the air for photosynthesis?", "(?i)carbon dioxide|CO2", "regex", "Carbon dioxide"),
    ("gas-breathe", "Which gas do humans need to breathe to live?", "Oxygen", C, "Oxygen"),
    ("symbol-gold", "What is the chemical symbol for gold?", "Au", "exact", "Au"),
    ("symbol-iron", "What is the chemical symbol for iron?", "Fe", "exact", "Fe"),
    ("symbol-sodium", "What is the chemical symbol for sodium?", "Na", "exact", "Na"),
    ("freeze-c", "At how many degrees Celsius does water freeze?", r"(?i)\b(0|zero)\b", "regex", "0"),
    ("boil-c", "At how many degrees Celsius does water boil at sea level?", r"\b100\b", "regex", "100"),
    ("legs-spider", "How many legs does a spider have?", r"(?i)\b(8|eight)\b", "regex", "8"),
    ("legs-insect", "How many legs does an insect have?", r"(?i)\b(6|six)\b", "regex", "6"),
    ("days-week", "How many days are in a week?", r"(?i)\b(7|seven)\b", "regex", "7"),
    ("months-year", "How many months are in a year?", r"(?i)\b(12|twelve)\b", "regex", "12"),
    ("hours-day", "How many hours are in a day?", r"(?i)\b(24|twenty-four)\b", "regex", "24"),
    ("minutes-hour", "How many minutes are in an hour?", r"(?i)\b(60|sixty)\b", "regex", "60"),
    ("continents", "How many continents are there?", r"(?i)\b(7|seven)\b", "regex", "7"),
    ("sky-color", "What color is a clear daytime sky?", "blue", C, "Blue"),
    ("grass-color", "What color is grass?", "green", C, "Green"),
    ("banana-color", "What color is a ripe banana?", "yellow", C, "Yellow"),
    ("snow-color", "What color is fresh snow?", "white", C, "White"),
    ("ocean-largest", "What is the largest ocean on Earth?", "Pacific", C, "The Pacific Ocean"),
    ("continent-largest", "What is the largest continent?", "Asia", C, "Asia"),
    ("desert-largest-hot", "What is the largest hot desert in the world?", "Sahara", C, "The Sahara"),
    ("river-egypt", "Which river flows through Egypt?", "Nile", C, "The Nile"),
    ("mountain-highest", "What is the highest mountain in the world?", "Everest", C, "Mount Everest"),
    ("animal-largest", "What is the largest animal on Earth?", "blue whale", C, "The blue whale"),
    ("animal-fastest", "What is the fastest land animal?", "cheetah", C, "The cheetah"),
    ("animal-king", "Which animal is called the king of the jungle?", "lion", C, "The lion"),
    ("animal-milk", "Which farm animal gives us most of our milk?", "cow", C, "The cow"),
    ("animal-honey", "Which insect makes honey?", "bee", C, "The bee"),
    ("animal-bamboo", "Which black and white bear eats bamboo?", "panda", C, "The giant panda"),
    ("animal-trunk", "Which animal has a long trunk?", "elephant", C, "The elephant"),
    ("animal-neck", "Which animal has the longest neck?", "giraffe", C, "The giraffe"),
    ("animal-baby-dog", "What is a baby dog called?", "puppy", C, "A puppy"),
    ("animal-baby-cat", "What is a baby cat called?", "kitten", C, "A kitten"),
    ("body-pump", "Which organ pumps blood through the body?", "heart", C, "The heart"),
    ("body-think", "Which organ do we think with?", "brain", C, "The brain"),
    ("body-breathe", "Which organs do we breathe with?", "lung", C, "The lungs"),
    ("language-brazil", "What language is mainly spoken in Brazil?", "Portuguese", C, "Portuguese"),
    ("language-mexico", "What language is mainly spoken in Mexico?", "Spanish", C, "Spanish"),
    ("currency-japan", "What is the currency of Japan?", "yen", C, "The yen"),
    ("currency-uk", "What is the currency of the United Kingdom?", "(?i)pound", "regex", "The pound sterling"),
    ("author-romeo", "Who wrote Romeo and Juliet?", "Shakespeare", C, "William Shakespeare"),
    ("painter-mona", "Who painted the Mona Lisa?", "(?i)da vinci|leonardo", "regex", "Leonardo da Vinci"),
    ("inventor-bulb", "Who is usually credited with inventing the practical light bulb?", "Edison", C, "Thomas Edison"),
    ("first-moon", "Who was the first person to walk on the Moon?", "Armstrong", C, "Neil Armstrong"),
    ("shape-sides3", "What is a shape with three sides called?", "triangle", C, "A triangle"),
    ("shape-sides4", "What is a shape with four equal sides and four right angles called?", "square", C, "A square"),
    ("math-2plus2", "What is 2 plus 2?", r"(?i)\b(4|four)\b", "regex", "4"),
    ("math-10times10", "What is 10 times 10?", r"\b100\b", "regex", "100"),
    ("season-cold", "Which season is the coldest of the year?", "winter", C, "Winter"),
    ("season-leaves", "In which season do leaves fall from the trees?", "(?i)autumn|fall", "regex", "Autumn"),
]


def main():
    out = Path(__file__).resolve().parent
    n = len(ITEMS)
    with open(out / f"easy-facts-{n}.workload.jsonl", "w", encoding="utf-8") as w:
        for id_, q, ref, grader, _ in ITEMS:
            w.write(json.dumps({
                "id": id_, "tag": "facts", "system": SYSTEM, "prompt": q,
                "expected": ref, "grader": grader,
                "sampling": {"max_tokens": MAX_TOKENS, "temperature": 0},
            }, ensure_ascii=False) + "\n")
    with open(out / f"easy-facts-{n}.oracle.answers.jsonl", "w", encoding="utf-8") as w:
        for _, q, _, _, reply in ITEMS:
            w.write(json.dumps({
                "prompt": q, "answer": reply,
                "source": "oracle: the workload's own reference answer (not a model)",
            }, ensure_ascii=False) + "\n")
    print(f"wrote {n} items to {out}")


if __name__ == "__main__":
    main()
