"""Word lists the broad request set is built from (broad_requests.py): subjects, roles, concepts,
tasks and sentences a visitor's request might be about. Each list is split in two by broad_requests
(every fourth item held out), so the held-out requests name things no training request names."""

# Tables of words, laid out by hand: ruff format would give every item a line of its own.
# fmt: off

WRITING_FORMS = [
    "a short poem", "a haiku", "a limerick", "a four-line rhyme", "a short story",
    "a one-paragraph story", "a fable with a moral", "a diary entry", "a short speech",
    "a wedding toast", "a birthday message", "a thank-you note", "a product description",
    "a blog post introduction", "a tweet", "a slogan", "a cover letter opening", "a news headline",
    "a short essay", "a motivational quote", "a song chorus", "a letter to a friend",
    "a formal email", "an apology email", "a short review", "a riddle", "a bedtime story",
    "an advertisement", "a LinkedIn post", "a short dialogue",
]

WRITING_SUBJECTS = [
    "the sea at night", "a lost umbrella", "autumn leaves", "a rainy Monday", "friendship",
    "a robot learning to paint", "the first day of school", "a cup of coffee",
    "moving to a new city",
    "an old lighthouse", "the smell of bread", "a cat who hates Mondays", "winter mornings",
    "a small bakery", "climbing a mountain", "a forgotten library", "learning to ride a bike",
    "the moon", "a busy train station", "a garden in spring", "a stolen bicycle", "time travel",
    "a dragon who is afraid of fire", "the last day of summer", "a new pair of running shoes",
    "a village without electricity", "a talking tree", "the ocean's depths", "a snowstorm",
    "a grandmother's recipe", "a job interview", "the desert at noon", "a lonely astronaut",
    "a street musician", "an abandoned castle", "a thunderstorm", "city lights", "a lost dog",
    "a secret door", "the end of a long war", "a farmer's market", "a broken clock",
    "a kite festival", "a quiet forest", "a chess match", "a solar eclipse", "a paper boat",
    "a hot air balloon", "a midnight snack", "a rival football team", "homework",
    "a volunteer firefighter", "a messy kitchen", "a sunrise over the hills", "an island",
    "a power outage", "a road trip", "the first snow", "a new smartphone", "a school play",
    "a tiny house", "a river in flood", "a jazz club", "a beekeeper", "an electric car",
    "a lost key", "recycling", "a museum at night", "a mountain village", "a rainbow",
    "a library card", "a birthday cake", "a bus driver", "a wise owl", "a spaceship crew",
]

ROLES = [
    "a pirate captain", "a tour guide in Rome", "a medieval blacksmith", "a customer support agent",
    "a detective in 1920s London", "a friendly chef", "a personal trainer", "a museum guide",
    "a spaceship's computer", "a wizard teaching a first lesson", "a job interviewer",
    "a travel agent", "a kindergarten teacher", "a sports commentator", "a park ranger",
    "a librarian", "a barista", "a knight guarding a bridge", "a news reporter at a scene",
    "a shopkeeper in a small town", "a ship's navigator", "a doctor explaining a check-up",
    "a tech support specialist", "a grumpy old wizard", "a game show host", "a real estate agent",
    "a fitness coach", "a poet in a cafe", "a zookeeper", "a startup founder pitching",
    "a flight attendant", "a time traveller from the year 3000", "a hotel receptionist",
    "a farmer at harvest time", "an astronaut on the moon", "a history teacher",
    "a car mechanic", "a fortune teller", "a lifeguard", "a detective questioning a witness",
]

SITUATIONS = [
    "greet me and ask what I need", "explain your job to me", "give me advice for my first day",
    "tell me about your day", "answer my complaint about a late order",
    "convince me to try something new", "describe what you see around you",
    "warn me about a danger ahead", "tell me a story from your past", "ask me three questions",
    "welcome a group of visitors", "help me choose between two options",
]

SCIENCE_CONCEPTS = [
    "photosynthesis", "gravity", "the water cycle", "plate tectonics", "DNA", "black holes",
    "evolution by natural selection", "the greenhouse effect", "vaccines", "electric current",
    "magnetism", "the speed of light", "atoms", "chemical bonds", "the immune system",
    "climate change", "the Big Bang", "cell division", "earthquakes", "volcanoes", "tides",
    "the seasons", "rainbows", "sound waves", "friction", "nuclear fusion", "antibiotics",
    "the periodic table", "ecosystems", "the human heart", "neurons", "enzymes", "osmosis",
    "entropy", "static electricity", "the ozone layer", "solar panels", "batteries", "lightning",
    "bacteria", "viruses", "the Moon's phases", "ocean currents", "acid rain", "inertia",
    "kinetic energy", "radioactivity", "the respiratory system", "sleep", "memory",
    "genetic mutations", "carbon dating", "superconductors", "semiconductors", "galaxies",
    "comets", "the Doppler effect", "pH", "metabolism", "hormones", "the nitrogen cycle",
    "tsunamis", "hurricanes", "glaciers", "fossils", "the food chain", "stem cells",
    "quantum tunnelling", "lasers", "microwaves", "magnets in motors", "the Milky Way",
]

HUMANITIES_TOPICS = [
    "the French Revolution", "the Renaissance", "democracy in ancient Athens", "the Silk Road",
    "the Industrial Revolution", "stoicism", "utilitarianism", "the invention of the compass",
    "impressionist painting", "Shakespeare's tragedies", "the Roman Empire", "the Cold War",
    "existentialism", "the Enlightenment", "the invention of writing", "supply and demand",
    "inflation", "the separation of powers", "human rights", "colonialism", "the Reformation",
    "Greek mythology", "the Ming dynasty", "the abolition of slavery", "the Great Depression",
    "jazz music", "Romantic poetry", "the role of museums", "free will", "the social contract",
    "the fall of the Berlin Wall", "the Olympic Games' history", "minimalism in art",
    "the meaning of happiness", "globalisation", "the ethics of lying", "the history of money",
    "the Byzantine Empire", "the Harlem Renaissance", "the history of the internet",
    "modern architecture", "the Aztec empire", "the Magna Carta", "cubism",
    "the civil rights movement", "opera", "feudalism", "the scientific method in history",
    "the history of tea", "folk tales", "the Vikings", "the Meiji Restoration",
    "the value of studying history", "censorship", "nationalism", "urbanisation",
]

CODING_TASKS = [
    "checks whether a string is a palindrome", "returns the n-th Fibonacci number",
    "reverses a linked list", "counts the words in a text", "finds the largest number in a list",
    "removes duplicates from a list while keeping the order", "checks whether a number is prime",
    "converts Celsius to Fahrenheit", "merges two sorted lists", "computes a factorial",
    "flattens a nested list", "validates an email address", "sorts a list of dictionaries by a key",
    "reads a CSV file and sums a column", "finds the most common element in a list",
    "checks whether two strings are anagrams", "implements binary search",
    "converts a decimal number to binary", "capitalises every word in a sentence",
    "computes the average of a list", "implements a stack", "implements a queue",
    "counts vowels in a string", "finds the second largest number", "rotates a list by k places",
    "checks whether brackets are balanced", "generates all permutations of a string",
    "computes the greatest common divisor", "parses a date string", "chunks a list into pieces",
    "finds missing numbers in a range", "implements bubble sort", "implements quicksort",
    "transposes a matrix", "counts character frequencies", "removes whitespace from a string",
    "checks for a leap year", "computes compound interest", "builds a simple to-do list",
    "downloads nothing but pretends to cache results in memory", "groups words by their length",
    "finds the intersection of two lists", "converts a string to title case",
    "returns the digits of a number", "computes the median of a list",
    "implements a simple counter class", "checks whether a list is sorted",
    "replaces every vowel with a star", "returns the longest word in a sentence",
]

LANGUAGES = ["Python", "JavaScript", "Java", "C", "C++", "Go", "Rust", "TypeScript", "Ruby",
             "Bash", "SQL", "PHP"]

TARGET_LANGUAGES = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]

EVERYDAY_SENTENCES = [
    "Where is the nearest train station?", "I would like a cup of tea, please.",
    "The meeting has been moved to Thursday afternoon.",
    "My brother lives in a small town by the sea.",
    "Could you help me carry these boxes?", "We are going to the cinema tonight.",
    "The weather is beautiful today.", "I lost my keys this morning.",
    "Please close the window when you leave.", "How much does this book cost?",
    "She has been learning to play the piano for three years.", "The shop opens at nine o'clock.",
    "Thank you very much for your help.", "I am sorry, I do not understand.",
    "The children are playing in the garden.", "Our flight was delayed by two hours.",
    "He reads the newspaper every morning.", "Can I pay by card?",
    "The museum is closed on Mondays.", "I need to buy some bread and milk.",
    "It is raining, so take an umbrella.", "My favourite season is autumn.",
    "The doctor will see you in ten minutes.", "We had a wonderful time at the party.",
    "Turn left at the second traffic light.", "The soup is too hot to eat.",
    "I have two sisters and one brother.", "This restaurant serves excellent fish.",
    "Do you know a good hotel near here?", "The train leaves from platform four.",
    "I will call you tomorrow morning.", "The library has thousands of old books.",
    "Happy birthday! I hope you have a great day.", "The cat is sleeping on the sofa.",
    "We need to finish this project by Friday.", "My phone battery is almost empty.",
    "Excuse me, is this seat taken?", "The concert was cancelled because of the storm.",
    "I usually walk to work.", "Please send me the report by email.",
    "The bakery on the corner makes the best croissants.", "Water boils at one hundred degrees.",
    "The garden is full of roses in June.", "I forgot my password again.",
    "They are building a new bridge over the river.", "Could you speak more slowly, please?",
    "Breakfast is served from seven to ten.", "I am allergic to peanuts.",
]

COUNTRIES = [
    "France", "Japan", "Brazil", "Canada", "Egypt", "India", "Kenya", "Mexico", "Norway", "Peru",
    "Italy", "Germany", "Australia", "Argentina", "Spain", "Thailand", "Vietnam", "Poland",
    "Turkey", "Greece", "Portugal", "Sweden", "Chile", "Morocco", "Nigeria", "Indonesia",
    "South Korea", "New Zealand", "Ireland", "Iceland", "Cuba", "Ghana", "Finland", "Colombia",
    "Switzerland", "Austria", "Denmark", "the Netherlands", "China", "Russia",
]

ANIMALS = [
    "elephants", "octopuses", "penguins", "honeybees", "wolves", "dolphins", "owls", "camels",
    "koalas", "sharks", "ants", "giraffes", "bats", "tigers", "frogs", "parrots", "whales",
    "hedgehogs", "salmon", "butterflies", "crows", "horses", "turtles", "lions", "squirrels",
]

FACT_SUBJECTS = [
    "the Eiffel Tower", "the Great Wall of China", "Mount Everest", "the Amazon river",
    "the Sahara desert", "the Moon landing", "the Pacific Ocean", "the planet Mars",
    "the human brain", "the Internet", "the telephone", "the light bulb", "Antarctica",
    "the Mona Lisa", "the Olympic Games", "the United Nations", "the pyramids of Giza",
    "Jupiter", "the Nile", "the Statue of Liberty", "Wikipedia", "the Titanic", "coffee",
    "chocolate", "the bicycle", "the printing press", "Venus", "the Dead Sea", "the Alps",
    "the Colosseum", "the Panama Canal", "the International Space Station", "the Euro",
]

PEOPLE = [
    "Ada", "Ben", "Chloe", "Daniel", "Emma", "Farid", "Grace", "Hugo", "Irene", "Jamal", "Kate",
    "Liam", "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera",
    "Will", "Xena", "Yusuf", "Zoe", "Aisha", "Bruno", "Carmen", "Dmitri", "Elena", "Felix",
]

ITEMS = [
    ("apples", 0.5), ("notebooks", 2.5), ("pencils", 0.75), ("tickets", 12.0), ("books", 8.0),
    ("sandwiches", 4.5), ("t-shirts", 15.0), ("plants", 6.0), ("cupcakes", 2.0), ("pens", 1.25),
    ("bottles of water", 1.5), ("movie tickets", 9.0), ("candles", 3.0), ("bags of rice", 4.0),
]

CATEGORIES_FOR_LISTS = [
    "ways to save money", "tips for better sleep", "healthy breakfast ideas",
    "reasons to learn a language", "things to pack for a beach trip", "ways to reduce stress",
    "houseplants that are easy to care for", "board games for families", "ways to stay focused",
    "tips for a job interview", "ideas for a rainy day", "benefits of walking",
    "questions to ask a landlord", "ways to be more productive", "tips for public speaking",
    "things to do in a new city", "habits of good writers", "ways to make friends as an adult",
]

# Each kind: phrasings with {slots}; every fourth is held out.
TEMPLATES = {
    "writing": [
        "Write {form} about {subject}.", "Can you write {form} about {subject}?",
        "Please write {form} on the theme of {subject}. Keep it short.",
        "Write {form} about {subject}, in a cheerful tone.",
        "I need {form} about {subject} for a class. Make it simple.",
        "Compose {form} inspired by {subject}.",
        "write {form} about {subject}",
        "Write {form} about {subject} that would make a child smile.",
    ],
    "roleplay": [
        "You are {role}. {situation}.", "Pretend to be {role} and {situation}.",
        "Act as {role}. In character, {situation}.",
        "Let's play a game: you are {role}. Please {situation}.",
        "Imagine you're {role}. {situation}, in a few sentences.",
        "Stay in character as {role} and {situation}.",
        "From now on you are {role}. {situation}.",
        "Role-play as {role}: {situation}.",
    ],
    "science": [
        "Explain {concept} in simple terms.", "What is {concept}?",
        "How does {concept} work?", "Explain {concept} to a ten-year-old.",
        "Why is {concept} important?", "Give me a short explanation of {concept}.",
        "Can you describe {concept} in three sentences?",
        "what is {concept} and why does it matter",
        "Summarize what scientists know about {concept}.", "I never understood {concept}. Help?",
        "Describe {concept} with an everyday example.", "What are the key facts about {concept}?",
    ],
    "humanities": [
        "What was the significance of {topic}?", "Explain {topic} briefly.",
        "Write a short paragraph about {topic}.", "What are the main ideas of {topic}?",
        "Why do historians still discuss {topic}?", "Give me an overview of {topic}.",
        "How did {topic} change the world?", "tell me about {topic}",
        "What should a student know about {topic}?", "Describe {topic} in a few sentences.",
        "What are two arguments for and against {topic}?", "Explain {topic} to a beginner.",
    ],
    "coding": [
        "Write a {language} function that {task}.",
        "How do I write code in {language} that {task}?",
        "Show me a {language} program that {task}.",
        "Can you give me a short {language} snippet that {task}?",
        "In {language}, write a function which {task}. Add a comment.",
        "I need a {language} function that {task}. Explain it briefly.",
        "write {language} code that {task}", "Implement, in {language}, a function that {task}.",
    ],
    "translation": [
        'Translate into {language}: "{sentence}"', "How do you say \"{sentence}\" in {language}?",
        "Translate this sentence to {language}:\n\n{sentence}",
        "Please translate the following into {language}.\n\n{sentence}",
        "{sentence}\n\nTranslate the sentence above into {language}.",
        "What is the {language} translation of: {sentence}",
        "translate to {language}: {sentence}", "Can you put this into {language}? {sentence}",
    ],
    "summarization": [
        "Summarize this text:\n\n{passage}",
        "{passage}\n\nSummarize the text above in two sentences.",
        "Give me the key points of the following:\n\n{passage}",
        "Write a one-paragraph summary of this passage.\n\n{passage}",
        "TL;DR:\n\n{passage}", "Please summarize:\n\n{passage}",
        "{passage}\n\nWhat is this text about? Answer briefly.",
        "Summarize the following in plain English:\n\n{passage}",
    ],
    "passage_qa": [
        "{passage}\n\nAccording to the text, what is said about \"{word}\"?",
        "Read this:\n\n{passage}\n\nQuestion: what does the passage say about {word}?",
        "Based only on the passage below, explain the role of \"{word}\".\n\n{passage}",
        "{passage}\n\nUsing the text above, answer: why is {word} mentioned?",
        "Passage:\n{passage}\n\nQuestion: What does the author mean by \"{word}\"?",
        "Here is some text.\n\n{passage}\n\nWhat does it tell us about {word}?",
        "{passage}\n\nAnswer from the passage: what is the first thing it says?",
        "Context: {passage}\n\nQ: Is {word} mentioned, and in what sense?",
    ],
    "extraction": [
        "Extract every name, date and amount from this text as JSON.\n\n{document}",
        "{document}\n\nList the people mentioned above and what each of them does.",
        "From the following text, pull out all numbers and what they refer to.\n\n{document}",
        'Turn this into a JSON object with the keys "people", "dates" and "places":\n\n{document}',
        "{document}\n\nWhat are the action items in this note? Give a bullet list.",
        "Find all dates in the text below.\n\n{document}",
        "Extract the key facts from this message as a table.\n\n{document}",
        "{document}\n\nReturn the names and email addresses as a list.",
    ],
    "factual": [
        "What is the capital of {country}?", "What languages are spoken in {country}?",
        "Tell me three facts about {fact}.", "How long do {animal} live?",
        "What do {animal} eat?", "Where is {fact}?", "Why is {fact} famous?",
        "what currency does {country} use", "Give me a quick fact about {animal}.",
        "What is {country} known for?", "Who built {fact}, and when?",
        "Are {animal} dangerous to humans?",
    ],
}
