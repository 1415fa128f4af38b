"""Question phrasing: noun phrases that name a relation's object ("the founder of X"), final
questions about an attribute or a relation ("In which year was {S} born?") and comparisons, each
with several wordings. Keys are an attribute/relation name, or (name, subject type) where the
wording depends on the type; `pick` tries the typed key first.
"""
from __future__ import annotations

# relation -> phrases naming its object, given the subject's phrase {X}
NP = {
    "born_in": ["the birthplace of {X}", "the city where {X} was born", "the hometown of {X}"],
    "spouse": ["the spouse of {X}", "the person who married {X}"],
    "parent": ["the parent of {X}", "the recorded parent of {X}"],
    "employer": ["the employer of {X}", "the organisation that employed {X}"],
    "educated_at": ["the university that {X} attended", "the alma mater of {X}"],
    "member_of": ["the band that {X} was a member of", "the band in which {X} played"],
    ("located_in", "city"): ["the region containing {X}", "the region where {X} lies"],
    ("located_in", "region"): ["the country containing {X}", "the country that {X} is part of"],
    ("located_in", "university"): ["the city where {X} is located", "the home city of {X}"],
    "capital": ["the capital of {X}", "the capital city of {X}"],
    "headquartered_in": ["the city where {X} is headquartered", "the headquarters city of {X}"],
    "founded_by": ["the founder of {X}", "the person who founded {X}"],
    "written_by": ["the author of {X}", "the writer of {X}"],
    "published_by": ["the publisher of {X}", "the company that published {X}"],
    "directed_by": ["the director of {X}", "the person who directed {X}"],
    "produced_by": ["the company that produced {X}", "the studio behind {X}"],
    "performed_by": ["the band that recorded {X}", "the band behind {X}"],
    ("held_in", "battle"): ["the city where {X} was fought", "the site of {X}"],
    ("held_in", "festival"): ["the city that hosts {X}", "the host city of {X}"],
    ("held_in", "treaty"): ["the city where {X} was signed", "the place where {X} was signed"],
}

# attribute -> final question about its value, {S} = the subject's phrase
ATTR_Q = {
    "birth_year": ["In which year was {S} born?", "What is the birth year of {S}?",
                   "{S} was born in what year?"],
    "death_year": ["In which year did {S} die?", "What year did {S} die in?",
                   "{S} died in which year?"],
    "occupation": ["What was the occupation of {S}?", "What did {S} do for a living?",
                   "{S} worked in which occupation?"],
    "population": ["What is the population of {S}?", "How many people live in {S}?",
                   "{S} has how many inhabitants?"],
    "founding_year": ["In which year was {S} founded?", "What is the founding year of {S}?",
                      "{S} was founded in which year?"],
    ("founding_year", "country"): ["In which year did {S} become independent?",
                                   "When did {S} gain independence? Give the year."],
    ("founding_year", "band"): ["In which year was {S} formed?", "{S} was formed in what year?"],
    ("founding_year", "festival"): ["In which year was {S} first held?",
                                    "Since which year has {S} been held?"],
    "elevation_m": ["What is the elevation of {S}?", "How high above sea level does {S} lie?"],
    "area_km2": ["What is the area of {S}?", "How large is {S} in square kilometres?"],
    "industry": ["In which industry does {S} operate?", "What industry is {S} in?"],
    "employees": ["How many employees does {S} have?", "How many people does {S} employ?"],
    "students": ["How many students does {S} have?", "How many students are enrolled at {S}?"],
    "genre": ["What is the genre of {S}?", "{S} belongs to which genre?"],
    "publication_year": ["In which year was {S} published?", "When was {S} first published?"],
    "pages": ["How many pages does {S} have?", "What is the page count of {S}?"],
    "release_year": ["In which year was {S} released?", "When did {S} come out?"],
    "runtime_min": ["How long is {S}?", "What is the running time of {S}?"],
    "tracks": ["How many tracks are on {S}?", "How many tracks does {S} contain?"],
    ("date", "battle"): ["On what date was {S} fought?", "When exactly was {S} fought?"],
    ("date", "treaty"): ["On what date was {S} signed?", "When exactly was {S} signed?"],
    "attendance": ["How many people attend {S} each year?",
                   "What is the yearly attendance of {S}?"],
}

# relation -> final question about its object
REL_Q = {
    "born_in": ["In which city was {S} born?", "Where was {S} born?",
                "What is the birthplace of {S}?"],
    "spouse": ["Who was {S} married to?", "Who is the spouse of {S}?"],
    "parent": ["Who is the recorded parent of {S}?", "{S} is the child of whom?"],
    "employer": ["Which organisation employed {S}?", "Who was the employer of {S}?"],
    "educated_at": ["Which university did {S} attend?", "Where was {S} educated?"],
    "member_of": ["Which band was {S} a member of?", "In which band did {S} play?"],
    ("located_in", "city"): ["In which region is {S}?", "{S} lies in which region?"],
    ("located_in", "region"): ["In which country is {S}?", "{S} is a region of which country?"],
    ("located_in", "university"): ["In which city is {S} located?", "Where is {S}?"],
    "capital": ["What is the capital of {S}?", "Which city is the capital of {S}?"],
    "headquartered_in": ["Where is {S} headquartered?", "In which city is {S} based?"],
    "founded_by": ["Who founded {S}?", "Who was the founder of {S}?", "{S} was founded by whom?"],
    "written_by": ["Who wrote {S}?", "Who is the author of {S}?"],
    "published_by": ["Which company published {S}?", "Who published {S}?"],
    "directed_by": ["Who directed {S}?", "Who was the director of {S}?"],
    "produced_by": ["Which company produced {S}?", "Which studio produced {S}?"],
    "performed_by": ["Which band recorded {S}?", "Which band released {S}?"],
    ("held_in", "battle"): ["Where was {S} fought?", "In which city was {S} fought?"],
    ("held_in", "festival"): ["Where is {S} held?", "Which city hosts {S}?"],
    ("held_in", "treaty"): ["Where was {S} signed?", "In which city was {S} signed?"],
}

# attribute -> comparison of two entities of one type, {A} and {B} their names
COMPARE_Q = {
    "founding_year": ["Which was founded earlier, {A} or {B}?",
                      "Which was founded first: {A} or {B}?"],
    ("founding_year", "country"): ["Which became independent earlier, {A} or {B}?"],
    ("founding_year", "band"): ["Which band was formed first, {A} or {B}?"],
    ("founding_year", "festival"): ["Which festival was first held earlier, {A} or {B}?"],
    "birth_year": ["Who was born first, {A} or {B}?", "Who was born earlier: {A} or {B}?"],
    "population": ["Which has more inhabitants, {A} or {B}?",
                   "Which is more populous: {A} or {B}?"],
    "publication_year": ["Which book was published first, {A} or {B}?"],
    "release_year": ["Which came out earlier, {A} or {B}?",
                     "Which was released first: {A} or {B}?"],
    "elevation_m": ["Which city lies higher, {A} or {B}?"],
    "students": ["Which university has more students, {A} or {B}?"],
    "runtime_min": ["Which film is longer, {A} or {B}?"],
}


def pick(table: dict, key: str, type_: str, r) -> str:
  """A random wording for `key` (preferring the one specific to `type_`)."""
  return r.choice(table.get((key, type_)) or table[key])


def mention(name: str, type_: str) -> str:
  """How a question names an entity: events take "the" ("the Battle of X")."""
  return f"the {name}" if type_ in ("battle", "festival", "treaty") else name


def sentence(text: str) -> str:
  return text[0].upper() + text[1:]
