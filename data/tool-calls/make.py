#!/usr/bin/env python3
"""Writes the tool-calls workload and its oracle answer file.

    python3 data/tool-calls/make.py

Sixty requests, written for edgecloud (no external source), each asking
for something one of five declared functions does, with its arguments in
the request's words: the weather in a city, a currency conversion, a
timer, a stock price, a song to play. Every request declares all five
functions and sets `tool_choice` to "required": the answer must be one
call, and it is graded `tool_call` against the expected call (the right
function, and every argument equal: strings without regard to case or
surrounding space, numbers by value, no argument the expected call lacks).

The answer file is an ORACLE stand-in for a strong cloud model: it
answers every request with the expected call itself. It measures what a
cascade can recover when the cloud is always right; it says nothing about
any real provider's accuracy.
"""
import json
from pathlib import Path

SYSTEM = "You are an assistant that acts by calling one of the functions you are given."
MAX_TOKENS = 64

CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "additionalProperties": False,
                       "required": ["city"],
                       "properties": {"city": {"type": "string", "description": "The city name."}}}}},
    {"type": "function", "function": {
        "name": "convert_currency",
        "description": "Convert an amount of money from one currency to another.",
        "parameters": {"type": "object", "additionalProperties": False,
                       "required": ["amount", "from_currency", "to_currency"],
                       "properties": {
                           "amount": {"type": "number"},
                           "from_currency": {"enum": CURRENCIES},
                           "to_currency": {"enum": CURRENCIES}}}}},
    {"type": "function", "function": {
        "name": "set_timer",
        "description": "Start a countdown timer.",
        "parameters": {"type": "object", "additionalProperties": False,
                       "required": ["minutes"],
                       "properties": {"minutes": {"type": "integer", "description": "Length in minutes."}}}}},
    {"type": "function", "function": {
        "name": "get_stock_price",
        "description": "Latest price of a stock, by its ticker symbol.",
        "parameters": {"type": "object", "additionalProperties": False,
                       "required": ["symbol"],
                       "properties": {"symbol": {"type": "string", "description": "Ticker, e.g. AAPL."}}}}},
    {"type": "function", "function": {
        "name": "play_song",
        "description": "Play a song by an artist.",
        "parameters": {"type": "object", "additionalProperties": False,
                       "required": ["title", "artist"],
                       "properties": {"title": {"type": "string"}, "artist": {"type": "string"}}}}},
]

WEATHER = [
    ("What's the weather like in Paris right now?", "Paris"),
    ("Is it raining in London?", "London"),
    ("How hot is it in Cairo today?", "Cairo"),
    ("Tell me the current weather in Tokyo.", "Tokyo"),
    ("Do I need an umbrella in Seattle?", "Seattle"),
    ("Weather report for Berlin, please.", "Berlin"),
    ("How cold is it in Oslo?", "Oslo"),
    ("What is the temperature in Madrid?", "Madrid"),
    ("Is it sunny in Sydney at the moment?", "Sydney"),
    ("Check the weather in Nairobi for me.", "Nairobi"),
    ("What are the weather conditions in Toronto?", "Toronto"),
    ("Is it windy in Chicago today?", "Chicago"),
]

CONVERT = [
    ("Convert 100 US dollars to euros.", 100, "USD", "EUR"),
    ("How much is 50 euros in British pounds?", 50, "EUR", "GBP"),
    ("Change 2000 Japanese yen into US dollars.", 2000, "JPY", "USD"),
    ("What is 75 Swiss francs in euros?", 75, "CHF", "EUR"),
    ("Convert 30 pounds sterling to Canadian dollars.", 30, "GBP", "CAD"),
    ("I have 12.5 US dollars; how many yen is that?", 12.5, "USD", "JPY"),
    ("Exchange 400 Canadian dollars for Swiss francs.", 400, "CAD", "CHF"),
    ("How many euros do I get for 1000 Japanese yen?", 1000, "JPY", "EUR"),
    ("Convert 9 euros into US dollars.", 9, "EUR", "USD"),
    ("What's 250 British pounds in US dollars?", 250, "GBP", "USD"),
    ("Turn 60 Swiss francs into British pounds.", 60, "CHF", "GBP"),
    ("Convert 5 US dollars to Canadian dollars.", 5, "USD", "CAD"),
]

TIMER = [
    ("Set a timer for 10 minutes.", 10),
    ("Start a 5 minute timer.", 5),
    ("Remind me in 25 minutes with a timer.", 25),
    ("I need a timer for 3 minutes for my eggs.", 3),
    ("Count down 45 minutes, please.", 45),
    ("Timer: 15 minutes.", 15),
    ("Set a countdown of 60 minutes.", 60),
    ("Please start a timer of 1 minute.", 1),
    ("Can you time 20 minutes for me?", 20),
    ("Put on a 90 minute timer.", 90),
    ("Set a 7 minute timer for the tea.", 7),
    ("Start timing 30 minutes.", 30),
]

STOCK = [
    ("What is Apple's stock (AAPL) trading at?", "AAPL"),
    ("Get me the latest price of MSFT.", "MSFT"),
    ("How much is one share of TSLA right now?", "TSLA"),
    ("Price check on NVDA, please.", "NVDA"),
    ("What's the current price of Amazon, ticker AMZN?", "AMZN"),
    ("Look up the stock price for GOOGL.", "GOOGL"),
    ("How is IBM stock doing? Ticker IBM.", "IBM"),
    ("Show the share price of Netflix (NFLX).", "NFLX"),
    ("What does a share of KO cost today?", "KO"),
    ("Quote for ticker INTC.", "INTC"),
    ("Tell me the stock price of Meta, symbol META.", "META"),
    ("What is the latest price for the ticker ORCL?", "ORCL"),
]

SONG = [
    ("Play Yesterday by The Beatles.", "Yesterday", "The Beatles"),
    ("Put on Halo by Beyonce.", "Halo", "Beyonce"),
    ("I want to hear Imagine by John Lennon.", "Imagine", "John Lennon"),
    ("Play the song Hello by Adele.", "Hello", "Adele"),
    ("Can you play Thriller by Michael Jackson?", "Thriller", "Michael Jackson"),
    ("Start Wonderwall by Oasis.", "Wonderwall", "Oasis"),
    ("Play Jolene by Dolly Parton, please.", "Jolene", "Dolly Parton"),
    ("Queue up Roxanne by The Police.", "Roxanne", "The Police"),
    ("Play Clocks by Coldplay.", "Clocks", "Coldplay"),
    ("I'd like to listen to Respect by Aretha Franklin.", "Respect", "Aretha Franklin"),
    ("Play Vogue by Madonna.", "Vogue", "Madonna"),
    ("Put on Creep by Radiohead.", "Creep", "Radiohead"),
]


def items():
    for i, (q, city) in enumerate(WEATHER, 1):
        yield f"weather-{i:02}", "get_weather", q, {"city": city}
    for i, (q, amount, frm, to) in enumerate(CONVERT, 1):
        yield f"convert-{i:02}", "convert_currency", q, {"amount": amount, "from_currency": frm, "to_currency": to}
    for i, (q, minutes) in enumerate(TIMER, 1):
        yield f"timer-{i:02}", "set_timer", q, {"minutes": minutes}
    for i, (q, symbol) in enumerate(STOCK, 1):
        yield f"stock-{i:02}", "get_stock_price", q, {"symbol": symbol}
    for i, (q, title, artist) in enumerate(SONG, 1):
        yield f"song-{i:02}", "play_song", q, {"title": title, "artist": artist}


def main():
    here = Path(__file__).parent
    rows = list(items())
    assert len(rows) == 60 and len({r[0] for r in rows}) == 60
    with open(here / "tool-calls-60.workload.jsonl", "w") as w, \
            open(here / "tool-calls-60.oracle.answers.jsonl", "w") as a:
        for cid, name, question, args in rows:
            expected = json.dumps({"name": name, "arguments": args})
            body = {
                "messages": [{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": question}],
                "tools": TOOLS,
                "tool_choice": "required",
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
            }
            w.write(json.dumps({"custom_id": cid, "tag": name, "body": body,
                                "expected": expected, "grader": "tool_call"}) + "\n")
            a.write(json.dumps({"prompt": question, "answer": "",
                                "tool_calls": [{"name": name, "arguments": args}],
                                "source": "oracle: the workload's own expected call (not a model)"}) + "\n")


if __name__ == "__main__":
    main()
