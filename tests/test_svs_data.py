"""Math problem sets: the shipped sample (every answer recomputed here), JSONL loading with field
errors, and the resumable epoch iterator."""
import json
import math
from fractions import Fraction as F

import pytest

from ssp_jax.svs import data as D
from ssp_jax.svs.math_grader import is_equiv, normalize

sympy = pytest.importorskip("sympy")   # the radical answers are compared symbolically

# id -> a Python computation of the answer, independent of the file's answer strings.
CHECKS = {
  'ms-001': '47*38',
  'ms-002': '1000-387-254',
  'ms-003': '2**10-3**5',
  'ms-004': '17**2-13**2',
  'ms-005': '144//9',
  'ms-006': 'sum(range(1,61))',
  'ms-007': '-7*8+6*9',
  'ms-008': '125//5//5',
  'ms-009': '3+4*(10-2**3)',
  'ms-010': '63*7',
  'ms-011': '1*3*5*7*9',
  'ms-012': 'abs(-12)-abs(5-20)',
  'ms-013': '999*11',
  'ms-014': 'math.factorial(6)//math.factorial(4)',
  'ms-015': 'math.isqrt(1764)',
  'ms-016': '28*35',
  'ms-017': '5**3+5**2+5+1',
  'ms-018': 'sum(i*i for i in range(1,7))',
  'ms-019': 'F(2,3)+F(3,4)',
  'ms-020': 'F(5,6)-F(1,4)',
  'ms-021': 'F(7,8)*F(12,35)',
  'ms-022': 'F(3,5)/F(9,10)',
  'ms-023': 'F(15,100)*240',
  'ms-024': '80*F(75,100)',
  'ms-025': 'F(375,1000)',
  'ms-026': 'F(25,10)*F(36,10)',
  'ms-027': 'F(40,100)*35',
  'ms-028': 'F(5,4)*12',
  'ms-029': '1/F(4,9)',
  'ms-030': '1-F(1,2)-F(1,3)-F(1,7)',
  'ms-031': 'F(3,4)*6',
  'ms-032': '(F(1,3)+F(1,5))/2',
  'ms-033': 'F(62-50,50)*100',
  'ms-034': 'F(2,10)+F(35,100)+F(125,1000)',
  'ms-035': 'F(2,3)**3',
  'ms-036': 'F(1,2)+F(1,4)+F(1,8)+F(1,16)',
  'ms-037': 'F(18,30)',
  'ms-038': 'F(30)/F(2,5)',
  'ms-039': 'F(31-7,3)',
  'ms-040': 'F(12+9,5-2)',
  'ms-041': 'F(14,2)+3',
  'ms-042': '(10-4)*3',
  'ms-043': 'math.isqrt(169)',
  'ms-044': 'sum(r for r in range(-50,51) if r*r-11*r+28==0)',
  'ms-045': 'F(-12,2)',
  'ms-046': 'max(r for r in range(-50,51) if r*r-5*r-14==0)',
  'ms-047': '8*4',
  'ms-048': 'F(19-4,5)',
  'ms-049': '3*16-2*4+1',
  'ms-050': '2*(2*6-5)-5',
  'ms-051': 'F(11-3,6-2)',
  'ms-052': 'F(18,2)',
  'ms-053': '3-5',
  'ms-054': '23**2-17**2',
  'ms-055': 'next(k for k in range(1,100) if k*k-4*36==0)',
  'ms-056': 'next(x for x in range(20) if 2**(x+1)==64)',
  'ms-057': '3**4',
  'ms-058': '87//3+1',
  'ms-059': '(41-9)//2',
  'ms-060': '1/(F(1,4)-F(1,6))',
  'ms-061': 'min(x*x-8*x+21 for x in range(-50,51))',
  'ms-062': '49-5',
  'ms-063': '10+3',
  'ms-064': 'next(a for a in range(9) if 3**a==81)+next(b for b in range(9) if 2**b==32)',
  'ms-065': 'math.gcd(84,126)',
  'ms-066': '18*30//math.gcd(18,30)',
  'ms-067': '2024%7',
  'ms-068': 'sum(1 for d in range(1,73) if 72%d==0)',
  'ms-069': 'sum(d for d in range(1,29) if 28%d==0)',
  'ms-070': 'next(p for p in range(91,200) if all(p%d for d in range(2,p)))',
  'ms-071': 'sum(1 for p in range(31,60) if all(p%d for d in range(2,p)))',
  'ms-072': 'pow(7,23,10)',
  'ms-073': 'sum(map(int,str(2**15)))',
  'ms-074': 'pow(3,100,5)',
  'ms-075': 'len(range(6,200,6))',
  'ms-076': 'max(p for p in range(2,1002) if 1001%p==0 and all(p%d for d in range(2,p)))',
  'ms-077': "len(str(math.factorial(25)))-len(str(math.factorial(25)).rstrip('0'))",
  'ms-078': 'next(n for n in range(2,1000) if all(n%m==1 for m in (2,3,4,5)))',
  'ms-079': "int('101101',2)",
  'ms-080': "int(''.join(str(100//7**i%7) for i in (2,1,0)))",
  'ms-081': 'sum(range(18,100,9))',
  'ms-082': 'max(n for n in range(100,1000) if n%13==0)',
  'ms-083': 'sum(1 for n in range(1,101) if n%3==0 or n%5==0)',
  'ms-084': 'pow(3,-1,11)',
  'ms-085': 'sum(1 for n in range(1,50) if math.gcd(n,50)==1)',
  'ms-086': 'math.gcd(2**12-1,2**8-1)',
  'ms-087': 'math.factorial(5)',
  'ms-088': 'math.comb(10,3)',
  'ms-089': 'math.factorial(5)//(math.factorial(2)*math.factorial(2))',
  'ms-090': 'F(math.comb(4,2),16)',
  'ms-091': 'F(sum(1 for a in range(1,7) for b in range(1,7) if a+b==8),36)',
  'ms-092': '5**3',
  'ms-093': '6*4',
  'ms-094': '8*(8-3)//2',
  'ms-095': 'F(3,8)*F(2,7)',
  'ms-096': '2**7',
  'ms-097': 'sum(1 for n in range(1,1000) if math.isqrt(n)**2==n)',
  'ms-098': '12*11',
  'ms-099': 'math.comb(7,3)',
  'ms-100': 'F(30,36)',
  'ms-101': 'math.comb(9,2)',
  'ms-102': '3**4',
  'ms-103': 'F(sum(1 for p in range(2,21) if all(p%d for d in range(2,p))),20)',
  'ms-104': 'math.comb(8,4)//2',
  'ms-105': 'F(13+4-1,52)',
  'ms-106': 'sum(1 for n in range(1,31) if sum(1 for d in range(1,n+1) if n%d==0)%2==1)',
  'ms-107': '14*9',
  'ms-108': '4*9',
  'ms-109': 'math.isqrt(9*9+12*12)',
  'ms-110': 'F(16*7,2)',
  'ms-111': 'F(180*4,9)',
  'ms-112': '(6-2)*180',
  'ms-113': '360//(180-140)',
  'ms-114': '25*sympy.pi',
  'ms-115': 'F(18,2)',
  'ms-116': '5**3',
  'ms-117': 'math.isqrt(9+16+144)',
  'ms-118': 'math.isqrt(36+64)',
  'ms-119': '(6+10)*5//2',
  'ms-120': '36*sympy.pi',
  'ms-121': '9*sympy.sqrt(3)',
  'ms-122': '5*sympy.sqrt(2)',
  'ms-123': '(90-24)//2',
  'ms-124': '25*sympy.pi',
  'ms-125': '(2*3-7)+(2*(-1)-4)',
  'ms-126': '4*math.isqrt(25+144)',
  'ms-127': '4+19*3',
  'ms-128': '3*(2**10-1)',
  'ms-129': '(lambda: (lambda f: f(f, 12))(lambda s, k: 1 if k <= 2 else s(s, k-1) + s(s, k-2)))()',
  'ms-130': 'F(12+15+21+24+33,5)',
  'ms-131': '5*18-(12+15+20+25)',
  'ms-132': 'F(6+7,2)',
  'ms-133': 'F(6*350,100)',
  'ms-134': '4*6//3',
  'ms-135': 'sum(2*k-1 for k in range(1,21))',
  'ms-136': 'F(35,10)*24*60',
  'ms-137': 'abs(30*3-6*0)',
  'ms-138': 'next(3*b for b in range(1,100) if 3*b+10==2*(b+10))',
}


def _as_reference(value) -> str:
  if isinstance(value, F):
    return f"{value.numerator}/{value.denominator}"
  if isinstance(value, sympy.Basic):
    return repr(float(value))
  return str(value)


def test_math_sample_answers_are_correct():
  problems = D.load_problems("builtin:math_sample")
  assert 100 <= len(problems) <= 150
  assert len({p.id for p in problems}) == len(problems) == len(CHECKS)
  for p in problems:
    value = eval(CHECKS[p.id], {"F": F, "math": math, "sympy": sympy})  # noqa: S307 (our table)
    assert is_equiv(p.answer, _as_reference(value)), (p.id, p.answer, value)
    assert normalize(p.answer) == p.answer, p.id      # stored in canonical form
    assert len(p.problem) >= 15


def test_load_problems_field_fallbacks(tmp_path):
  path = tmp_path / "set.jsonl"
  lines = [{"problem": "What is 1+1?", "answer": "2"},
           {"question": "What is 2+2?", "answer": 4, "id": "q4", "data_source": "easy"},
           {"question": "What is 3+3?", "ref_answer": "6"},
           {"problem": "What is 4+4?", "solution": "4+4 = \\boxed{8}, indeed"}]
  path.write_text("".join(json.dumps(l) + "\n" for l in lines) + "\n")
  got = D.load_problems(str(path))
  assert [(p.id, p.answer, p.source) for p in got] == [
      ("set-0", "2", ""), ("q4", "4", "easy"), ("set-2", "6", ""), ("set-3", "8", "")]


@pytest.mark.parametrize("record,field", [
    ({"answer": "2"}, "`problem` or `question`"),
    ({"problem": "   ", "answer": "2"}, "`problem`"),
    ({"question": 5, "answer": "2"}, "`question`"),
    ({"problem": "What is 1+1?"}, "`answer`"),
    ({"problem": "What is 1+1?", "answer": ""}, "`answer`"),
    ({"problem": "What is 1+1?", "answer": None}, "`answer`"),
    ({"problem": "What is 1+1?", "solution": "it is two"}, "`solution`"),
    (["not", "an", "object"], "JSON object"),
])
def test_malformed_record_names_file_line_and_field(tmp_path, record, field):
  path = tmp_path / "bad.jsonl"
  path.write_text(json.dumps({"problem": "ok problem?", "answer": "1"}) + "\n" +
                  json.dumps(record) + "\n")
  with pytest.raises(ValueError) as e:
    D.load_problems(str(path))
  assert f"{path}:2" in str(e.value) and field in str(e.value)


def test_missing_and_empty_files(tmp_path):
  with pytest.raises(FileNotFoundError):
    D.load_problems(str(tmp_path / "nope.jsonl"))
  (tmp_path / "empty.jsonl").write_text("\n")
  with pytest.raises(ValueError, match="no problems"):
    D.load_problems(str(tmp_path / "empty.jsonl"))
  with pytest.raises(ValueError, match="unknown builtin"):
    D.load_problems("builtin:nope")


def _problems(n):
  return [D.MathProblem(str(i), f"problem {i}", str(i)) for i in range(n)]


def test_iterator_covers_each_epoch_once_and_resumes():
  it = D.ProblemIterator(_problems(7), seed=3)
  first = [p.id for p in it.next_batch(3) + it.next_batch(3)]
  state = it.state_dict()
  rest = [p.id for p in it.next_batch(3) + it.next_batch(3)]
  epoch0 = first + rest[:1]
  assert sorted(epoch0) == sorted(str(i) for i in range(7))     # one epoch = a permutation
  assert epoch0 != [str(i) for i in range(7)]                   # shuffled
  resumed = D.ProblemIterator(_problems(7), seed=3)
  resumed.load_state_dict(json.loads(json.dumps(state)))        # through the checkpoint JSON
  assert [p.id for p in resumed.next_batch(3) + resumed.next_batch(3)] == rest
  assert it.epoch == 1 and state == {"epoch": 0, "position": 6, "size": 7, "seed": 3}


def test_iterator_without_shuffle_keeps_file_order_and_wraps():
  it = D.ProblemIterator(_problems(3), shuffle=False)
  assert [p.id for p in it.next_batch(5)] == ["0", "1", "2", "0", "1"]
  assert (it.epoch, it.position) == (1, 2)
