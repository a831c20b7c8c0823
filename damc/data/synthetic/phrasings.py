"""What the simulated customer and agent say, and the noise around the threads.

Greetings and identification lines of the opening, the agent's retry apologies, small talk on both
sides, and the knowledge-base material (topics with their policy facts, order-specific questions, long
mostly irrelevant filler sentences, article titles) that fills search results.
"""

from __future__ import annotations

_SAY_HICCUP = ["Sorry, our system is being a bit slow — trying that again.",
               "Hmm, that lookup timed out on my side. One more try.",
               "Apologies, I hit a temporary error. Retrying now.",
               "Bear with me a moment, the tool didn't respond properly.",
               "That didn't go through on the first attempt; let me try again."]
_GREET = ["Hi there,", "Hello!", "Hey,", "Good morning.", "Hi,", "Hello, hoping you can help.",
          "Hi — quick question, well maybe not so quick.", "Evening!", "Hiya.", "Hello support team,"]
_OPEN_REASON = ["I've got a couple of problems with recent orders.", "I need help with a few things on my account.",
                "something went wrong with my last orders and I'm getting frustrated",
                "I have an issue with an order and a question about another one.",
                "I'm having some trouble with stuff I bought from you.",
                "a couple of my orders haven't gone the way they should."]
_ID_EMAIL = ["My email is {email}.", "The account is under {email}.", "you can find me with {email}",
             "I signed up with {email} if that helps.", "Email on the account: {email}"]
_ID_PHONE = ["My phone number on file is {phone}.", "Try my number, {phone}.",
             "It should be under the phone number {phone}."]
_ID_NAME = ["Name's {name}, I'm in {city}.", "I'm {name} from {city}.",
            "The account is in my name, {name} — {city}."]
_SAY_ORDERS_NO_ID = [
    "Thanks, {first}. I've found your account and I can see {n} recent orders, including {refs}. What can I help with first?",
    "Got it — you're verified, {first}. I'm looking at your order history now ({n} orders, e.g. {refs}). Which issue shall we start with?",
    "Thanks for waiting. Your account is pulled up and I can see your recent purchases ({refs} among them). Tell me what went wrong.",
    "I have your account open, {first}. There are {n} orders in the last few months. Which one is giving you trouble?"]
_SMALL_USER = ["Sorry, my cat just walked across the keyboard 😅", "How's your day going, by the way?",
               "Is it busy today? The wait was a bit long.", "Quick aside, are you a bot or a person?",
               "Ugh, it's been one of those weeks.", "Hang on, someone's at the door. Back in a sec.",
               "ok I'm back, sorry about that", "Thanks for being patient with me, honestly.",
               "By the way the website looks different, did you redesign it?",
               "lol my kid is asking who I'm typing to", "It's raining here again, typical.",
               "Do you work weekends too?"]
_SMALL_SAY = ["No problem at all — take your time.", "Ha, it happens! I'm here whenever you're ready.",
              "Doing well, thanks for asking! Let's keep going.", "No worries at all.",
              "I'm an automated assistant, but I can loop in a colleague if you ever need one.",
              "Thanks for your patience too. Let's keep sorting this out.",
              "Sorry about the wait today — we're busier than usual.",
              "Yes, the site got a refresh last month. Let me know if anything is hard to find."]

_KB_TOPICS = {
    "returns": ("What's your return window for {cat}?", "return policy {cat}",
                ["Items can be returned within 30 days of delivery in original condition.",
                 "Final-sale and clearance items cannot be returned.",
                 "Return shipping is free for damaged or defective items.",
                 "Opened hygiene products are not eligible for return."]),
    "warranty": ("Does the {cat} come with a warranty?", "warranty coverage {cat}",
                 ["Most electronics carry a 12-month limited manufacturer warranty.",
                  "Warranty claims require proof of purchase and the serial number.",
                  "Accidental damage is not covered by the standard warranty."]),
    "shipping": ("How long does standard shipping normally take?", "standard shipping times",
                 ["Standard shipping takes 3–7 business days within the mainland.",
                  "Expedited shipping takes 1–2 business days when ordered before 2 pm.",
                  "Remote areas may add up to 3 business days."]),
    "price": ("If something I bought drops in price, do you match it?", "price adjustment price match",
              ["Price adjustments are available within 14 days of purchase.",
               "We do not match marketplace sellers or flash sales."]),
    "intl": ("Can you ship to another country if I'm travelling?", "international shipping",
             ["We ship to 38 countries; duties are charged at checkout.",
              "International orders cannot be redirected once dispatched."]),
    "gift": ("Can I add gift wrap to an order that's already placed?", "gift wrap existing order",
             ["Gift wrap can be added until the order enters fulfilment.",
              "Gift receipts hide prices and can be emailed separately."]),
    "points": ("How do the loyalty points work again?", "loyalty points rewards",
               ["Members earn 1 point per dollar spent; 100 points equal a $5 reward.",
                "Points expire after 12 months without account activity."]),
}
_KB_ORDER_QUESTIONS = {
    "returns": ["Could I still return the {ref} if I wanted to?", "Am I still inside the return window for the {ref}?",
                "If I send back the {ref}, do I get everything back?"],
    "warranty": ["Does the {ref} I bought still have warranty?", "How long is the warranty on my {ref}?",
                 "Is the {ref} covered if it breaks next month?"],
    "shipping": ["How long does shipping usually take? Asking about the {ref}.",
                 "When should I expect the {ref}, normally?"],
    "price": ["The {ref} is cheaper on your site now — can I get the difference back?",
              "I saw the {ref} on sale this week, do you do price adjustments?"],
    "gift": ["Can I still add gift wrap to the {ref} order?", "Is it too late to make the {ref} a gift order?"],
}
_KB_FILLER = ["Customers should keep their order confirmation email for reference.",
              "Our support team is available 7 days a week from 8 am to 10 pm local time.",
              "Some exceptions apply to items purchased from third-party sellers on our marketplace.",
              "Please allow additional processing time during holiday periods and promotional events.",
              "Bulky items may be delivered by a freight partner who will call to schedule a time slot.",
              "This article was last reviewed by the policy team and supersedes earlier guidance.",
              "Store credit is issued as a digital balance and never expires.",
              "Bank transfers may take up to 10 business days depending on the receiving bank.",
              "Refunds to the original payment method usually post within 5–10 business days.",
              "Orders placed with a gift card are refunded to a new gift card.",
              "Items must include all accessories, manuals and packaging to qualify.",
              "For safety reasons, we cannot accept returns of used mattresses or car seats.",
              "If your package shows as delivered but you cannot find it, check with neighbours first.",
              "We may ask for photos of damaged items to help improve our packaging.",
              "Subscriptions can be paused or cancelled at any time from the account page.",
              "Promotional codes cannot be applied retroactively to completed orders.",
              "In some regions, local consumer law grants additional rights which are not affected.",
              "Exchanges are processed as a return plus a new order at current prices.",
              "Carrier delays caused by weather are outside our control but we will help trace parcels.",
              "Assembly services are offered through a partner in selected cities only."]
_KB_TITLES = ["Returns & refunds policy", "Warranty information", "Shipping options and delivery times",
              "Price adjustments", "International orders", "Gift services", "Loyalty programme FAQ",
              "Damaged or defective items", "Missing packages", "Payment methods we accept",
              "Changing or cancelling an order", "Account security tips", "Store credit explained",
              "Large item delivery", "Product recalls", "Subscriptions and auto-delivery"]
