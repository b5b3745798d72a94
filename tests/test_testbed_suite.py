"""The testbed's task suites: every registered version has the suite interface; the shipped suite's
records are pure functions with certain and uncertain fields in every grounded task and open answers;
chart labels sit in one patch row; captions mention their shapes and cells in reading order; one rule
keeps held-out scenes out of training; answers are scored against their scene."""

import collections

import numpy as np
import pytest

from glance_jax.data.records import read_task_file
from glance_jax.testbed import evaluate, paths, probe, stream, suites

# Scenes, images and readings are v4's in every later version (v5 shows v4's scenes record for record:
# test_v5_shows_v4s_scenes_and_reads_them_first), so they are tested on v4, whichever version ships.
S = suites.get("v4")
INTERFACE = ("VERSION", "TASKS", "GROUNDED", "OPEN", "QUESTIONS", "SIZES", "HELDOUT_RESERVED", "TARGET_TRAIN",
             "STREAM", "record", "draw_record", "reserved_scenes", "render", "train_record", "write_task",
             "record_index", "ANSWER_TOKENS", "reading")


def test_every_version_has_the_suite_interface(tmp_path):
  for version in suites.VERSIONS:
    s = suites.get(version)
    assert all(hasattr(s, name) for name in INTERFACE), [n for n in INTERFACE if not hasattr(s, n)]
    assert s.VERSION == version and s.TASKS == s.GROUNDED + s.OPEN == s.STREAM.tasks
    assert set(s.QUESTIONS) == set(s.SIZES) == set(s.TASKS)
  suites.write_version(tmp_path, suites.DEFAULT)
  assert suites.read_version(tmp_path) == suites.DEFAULT
  (tmp_path / suites.MARKER).write_text("{}")
  with pytest.raises(ValueError, match="suite.json: expected"):
    suites.read_version(tmp_path)
  with pytest.raises(ValueError, match="suite.json: not found"):
    suites.read_version(tmp_path / "empty")
  with pytest.raises(ValueError, match="unknown testbed suite version 'v9'"):
    suites.get("v9")


def test_render_is_pure_and_splits_differ():
  for task in S.TASKS:
    a, q, ans = S.render(task, "heldout", 3)
    b, _, ans_b = S.render(task, "heldout", 3)
    assert np.array_equal(np.asarray(a), np.asarray(b)) and ans == ans_b
    assert a.size == S.SIZES[task] and q == S.QUESTIONS[task]
    assert S.render(task, "train", 3)[2] != ans
  with pytest.raises(ValueError, match="unknown testbed task 'nope'"):
    S.render("nope", "train", 0)
  with pytest.raises(ValueError, match="held-out index 64 outside the reserved 0..63"):
    S.render("table", "heldout", S.HELDOUT_RESERVED)


def test_chart_labels_sit_in_one_patch_row():
  """Bars stand on y = 95; below it only the letter labels, all inside the patch row 112-127."""
  for i in range(40):
    scene, image, _ = S.record("chart", "heldout", i)
    ink = (np.asarray(image) < 250).any(-1)            # [H, W]
    assert not ink[96:112].any(), i
    rows = np.nonzero(ink[96:].any(1))[0] + 96
    assert rows.min() >= 112 and rows.max() <= 127, (i, rows)
    for col in range(6):                                # one label per bar column
      assert ink[112:, 32 * col: 32 * col + 32].any(), (i, col)


def test_every_grounded_task_mixes_certain_and_uncertain_fields():
  for task in S.GROUNDED:
    share = np.mean([c for i in range(64) for c in S.record(task, "heldout", i)[0].clear])
    assert 0.3 < share < 0.9, (task, share)
  styles = [s for i in range(64) for s in S.record("table", "heldout", i)[0].draw["styles"]]
  assert set(styles) == set(S.STYLES)


def test_hidden_chart_heights_are_exactly_those_in_the_band():
  for i in range(64):
    scene, image, _ = S.record("chart", "heldout", i)
    band = scene.draw["band"]
    px = np.asarray(image).astype(int)
    for col, (h, pale) in enumerate(zip(scene.draw["heights"], scene.draw["pale"])):
      at_top = tuple(px[S._BASE - 10 * h, 32 * col + 16])   # the bar's top row, mid-bar
      hidden = band is not None and band[0] <= h <= band[1]
      assert (at_top == S._BAND) == hidden, (i, col, h, band)
      assert scene.clear[col] == (not hidden and not pale)


def test_answers_are_open_where_the_suite_says():
  assert {";" in S.render("table", "train", i)[2] for i in range(40)} == {True, False}   # "; " or ", "
  firsts = set()
  for i in range(40):
    scene, _, ans = S.record("chart", "train", i)
    firsts.add(ans.split(" is ")[0] == scene.fields[0].split(" is ")[0])
  assert firsts == {True, False}                        # left to right and right to left
  phrasings = set()
  for i in range(200):
    ans = S.render("caption", "train", i)[2]
    phrasings.add(ans[:evaluate._MENTION.search(ans).start()])
  assert len(phrasings) >= 8, phrasings


def test_captions_mention_shapes_and_cells_in_reading_order():
  styles, lengths = [], []
  for i in range(64):
    scene, image, ans = S.record("caption", "heldout", i)
    d = scene.draw
    assert 3 <= len(scene.fields) <= 4 and d["cells"] == sorted(d["cells"])
    assert [" ".join(m) for m in evaluate._MENTION.findall(ans)] == list(scene.fields), ans
    for f, cell in zip(scene.fields, d["cells"]):
      assert f"{f} in cell {cell + 1}" in ans, ans
    assert ", and" not in ans                           # no Oxford comma
    assert scene.clear == tuple(s == "clear" for s in d["styles"])
    styles += d["styles"]
    lengths.append(len(ans))
    px = np.asarray(image).astype(int)
    for cell, color, style in zip(d["cells"], d["colors"], d["styles"]):
      x, y = 64 * (cell % 2), 64 * (cell // 2)
      centre = px[y + 40, x + 32]                     # below any sliver: the patch when hidden
      if style in ("hidden", "obscured"):
        assert tuple(centre) == S._PATCH, (i, cell)
      elif style == "faint" and not np.array_equal(centre, [255, 255, 255]):
        assert centre.min() > min(S.COLORS[color]) + 60, (i, cell, centre)     # pale
  assert set(styles) == set(S.CAPTION_STYLES)
  assert 0.3 < np.mean([s == "clear" for s in styles]) < 0.7
  assert np.mean(lengths) > 90                           # ~35-40 tokens: rounds fail inside a caption


def test_one_rule_keeps_heldout_scenes_out_of_training(monkeypatch):
  for task in S.TASKS:
    reserved = S.reserved_scenes(task)
    assert len(reserved) > 0.9 * S.HELDOUT_RESERVED
    assert all(S.record(task, "train", i)[0].content not in reserved for i in range(100))
  # Reserve train draw 5's own scene: index 5 is redrawn at 5 + OFFSET, index 6 is untouched.
  scene5 = S.draw_record("chart", "train", 5)[0]
  monkeypatch.setattr(stream.Stream, "reserved_scenes", lambda self, task: frozenset({scene5.content}))
  assert S.train_record("chart", 5)[2] == S.draw_record("chart", "train", 5 + stream.OFFSET)[2]
  assert S.train_record("chart", 6)[2] == S.draw_record("chart", "train", 6)[2]


def test_head_prompts_are_the_targets_train_records(tmp_path):
  """The head's train prompts (write_task) and the target's batches (train_record) are one stream."""
  path = S.write_task("caption", "train", 4, tmp_path, start=2)
  recs = read_task_file(path, on_error="raise", verify_images=True)
  assert [r.answers[0] for r in recs] == [S.train_record("caption", i)[2] for i in range(2, 6)]
  assert [S.record_index(r.id) for r in recs] == [2, 3, 4, 5]
  assert all(r.prompt == S.QUESTIONS["caption"] for r in recs)


def test_scores_against_the_scene():
  scene, _, _ = S.record("chart", "heldout", 0)
  rev = ", ".join(scene.fields[::-1]) + "."
  s = evaluate.score("chart", rev, scene)
  assert s["all_hits"] == s["all_n"] == 6                # bars in any order
  assert s["clear_n"] == sum(scene.clear) and s["clear_n"] + s["unclear_n"] == 6
  s = evaluate.score("chart", rev.replace(scene.fields[0], scene.fields[0][:-1] + "0"), scene)
  kind = "clear" if scene.clear[0] else "unclear"
  assert s["all_hits"] == 5 and s[f"{kind}_hits"] == s[f"{kind}_n"] - 1
  lines = S.record("lines", "heldout", 1)[0]
  text = "\n".join(" ".join(lines.fields[3 * r: 3 * r + 3]) for r in range(4))
  assert evaluate.score("lines", text, lines)["all_hits"] == 12
  pooled = evaluate.pool_scores([evaluate.score("chart", rev, scene), evaluate.score("chart", "", scene)])
  assert pooled["fields"] == 0.5 and pooled["n_fields"] == 12
  # captions: content (the multiset of mentions) and mention by mention in reading order
  cap = next(sc for sc in (S.record("caption", "heldout", i)[0] for i in range(64))
             if len(set(sc.fields)) == len(sc.fields) and not all(sc.clear))
  said = lambda fields: "There is " + ", ".join(f"a {f}" for f in fields) + "."  # noqa: E731
  s = evaluate.score("caption", said(cap.fields), cap)
  assert s["content"] == 1.0 and s["all_hits"] == len(cap.fields) and s["clear_n"] == sum(cap.clear)
  s = evaluate.score("caption", said(cap.fields[::-1]), cap)
  assert s["content"] == 1.0 and s["all_hits"] < len(cap.fields)        # right shapes, wrong order
  pooled = evaluate.pool_scores([evaluate.score("caption", said(cap.fields), cap),
                                 evaluate.score("caption", "Nothing.", cap)])
  assert pooled["content"] == 0.5 and pooled["fields"] == 0.5 and pooled["n_fields"] == 2 * len(cap.fields)


def test_probe_char_kinds():
  scene, _, answer = S.record("chart", "heldout", 0)
  kinds = probe.char_kinds(scene, answer)
  for field, clear in zip(scene.fields, scene.clear):
    i = answer.index(field)
    assert set(kinds[i: i + len(field)]) == {"clear" if clear else "unclear"}
  assert kinds[answer.index(",")] == "other" and kinds[-1] == "other"
  cap, _, answer = next(r for r in (S.record("caption", "heldout", i) for i in range(64))
                        if len(set(r[0].fields)) == len(r[0].fields) and not all(r[0].clear))
  kinds = probe.char_kinds(cap, answer)
  for f, c in zip(cap.fields, cap.clear):
    assert kinds[answer.index(f)] == ("clear" if c else "unclear"), (f, answer)


# --- suite v5: v4's reading, then a free explanation ------------------------------------------------

V5 = suites.get("v5")


def test_v5_shows_v4s_scenes_and_reads_them_first():
  """v5's held-out and train records show v4's scenes and images; the part before the blank line
  is a reading that scores every field right against the scene; the explanation after it has one
  clause per field, by position, and besides the template says only the grounded value its subject
  names: a chart bar's height and a line's first word, as the reading read them."""
  v4 = suites.get("v4")
  for task in V5.TASKS:
    for split, i in (("heldout", 3), ("train", 5)):
      s4, im4, _ = v4.record(task, split, i)
      s5, im5, ans = V5.record(task, split, i)
      assert s5.content == s4.content and im5.tobytes() == im4.tobytes()
      read, explained = ans.split(V5.READING_END)
      assert V5.reading(ans) == read
      sc = evaluate.score(task, read, s5)
      assert sc["all_hits"] == sc["all_n"] == len(s5.fields), (task, read)
      n = 4 if task == "lines" else len(s5.fields)
      if task == "chart":       # "A is 3" read -> "bar A (3)" said
        subjects = [f"bar {f.split(' is ')[0]} ({f.split(' is ')[1]})" for f in sorted(evaluate.fields(task, read))]
      elif task == "lines":     # the k-th line's first word
        subjects = [f"line {k + 1} ({line.split()[0]})" for k, line in enumerate(evaluate.fields(task, read))]
      else:
        subjects = [f"{task if task == 'table' else 'shape'} {k}".replace("table", "row") for k in range(1, n + 1)]
      assert len(subjects) == n
      rest = explained.lower()
      for subject in subjects:
        assert subject.lower() in rest, (task, subject, explained)
        rest = rest.replace(subject.lower(), " ")
      said = set(rest.replace(".", " ").replace(",", " ").replace(":", " ").split())
      template = set(" ".join(V5._OPENERS + V5._EXPLAIN[task]["close"] + V5._CONNECTIVES + V5._VERBS
                              + V5._ADJECTIVES + ("is", "and")).lower().replace(".", " ")
                     .replace(",", " ").replace(":", " ").split())
      assert said <= template, (task, said - template)


def test_v5_explanations_fork_at_every_clause():
  """Openers, closers, connectives (grounded tasks), verbs (grounded) and adjectives are drawn
  uniformly: over 200 answers each option appears; the table's and chart's separators are drawn per
  field. A grounded clause's forks are each followed by a determined token (always three
  adjectives); a caption clause says four to six, so its forks come in runs. Openers are short (a
  determined stretch is a round that may hit the block cap)."""
  ex = {t: [V5.render(t, "train", i)[2].split(V5.READING_END)[1] for i in range(200)] for t in V5.TASKS}
  for task, spec in V5._EXPLAIN.items():
    for opener in V5._OPENERS:
      assert sum(e.startswith(opener + " ") for e in ex[task]) > 25, (task, opener)
    for closer in spec["close"]:
      assert sum(e.endswith(closer) for e in ex[task]) > 25, (task, closer)
    for con in V5._CONNECTIVES[1:]:
      assert (sum(e.count(con) for e in ex[task]) > 100) == (task != "caption"), (task, con)
    for word in V5._ADJECTIVES:
      assert sum(e.count(f" {word}") for e in ex[task]) > 50, (task, word)
    for word in V5._VERBS:
      assert (sum(e.count(f" {word}") for e in ex[task]) > 50) == (task != "caption"), (task, word)
  for task in ("table", "chart"):
    readings = [V5.reading(V5.render(task, "train", i)[2]) for i in range(40)]
    assert sum((";" in r) and ("," in r) for r in readings) > 20, task
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  assert max(len(tok.encode(o).ids) for o in V5._OPENERS) <= 5
  import re
  for task in V5.TASKS:
    bodies = [e.split(": ", 1)[1] for e in ex[task]]                  # past the opener
    clauses = [c for e in bodies for c in e.split(". ")[:-1]]        # before the closer
    said = [re.sub(r"^.*? (looks|seems|appears|is) ", "", c).rstrip(".") for c in clauses]
    lists = [re.split(r", | and ", x) for x in said]
    counts = {len(x) for x in lists}
    assert counts == ({4, 5, 6} if task == "caption" else {3}), (task, counts)
    assert all(len(set(x)) == len(x) and set(x) <= set(V5._ADJECTIVES) for x in lists), task
  # the caption's reading is v4's, frame and all
  v4 = suites.get("v4")
  for i in range(20):
    s4 = v4.record("caption", "train", i)[0]
    assert evaluate.score("caption", V5.reading(V5.render("caption", "train", i)[2]), s4)["all_hits"] == len(s4.fields)


def test_v5_answer_lengths():
  """96-192 tokens an answer ("about": the shortest are ~92) with the shipped tokenizer, and the
  longest prompt + answer fits the recipe's seq_len."""
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  for task in V5.TASKS:
    n = [len(tok.encode(V5.render(task, "train", i)[2]).ids) for i in range(60)]
    assert 88 <= min(n) and max(n) <= 192 and 100 <= np.mean(n) <= 170, (task, min(n), max(n))
    assert max(n) + 60 <= V5.TARGET_TRAIN["seq_len"] and max(n) < V5.ANSWER_TOKENS


# --- suite v5b: v5 with the caption's forks ---------------------------------------------------------

V5B = suites.get("v5b")


def test_v5b_changes_the_caption_alone_and_still_reads_it():
  """Grounded records are v5's string for string; a caption record shows v5's scene and image, its
  reading scores every mention right whatever its cell phrasing and gaps."""
  for task in V5B.TASKS:
    for split, i in (("heldout", 2), ("train", 7)):
      s5, im5, a5 = V5.record(task, split, i)
      s, im, a = V5B.record(task, split, i)
      assert s.content == s5.content and im.tobytes() == im5.tobytes()
      assert (a == a5) == (task != "caption"), (task, a)
      sc = evaluate.score(task, V5B.reading(a), s)
      assert sc["all_hits"] == sc["all_n"] == len(s.fields), (task, a)


def test_v5b_caption_forks_in_its_reading_and_its_clauses():
  """Over 200 caption answers: both cell phrasings and both gaps occur, each drawn apart within an
  answer; every verb and each of the ten adjectives occurs; a clause says four to six adjectives, none
  twice; every fork's options start with different tokens of the shipped tokenizer."""
  import re

  from tokenizers import Tokenizer
  answers = [V5B.render("caption", "train", i)[2] for i in range(200)]
  readings = [V5B.reading(a) for a in answers]
  assert sum("in cell" in r and "(cell" in r for r in readings) > 40
  assert sum(";" in r for r in readings) > 40 and sum("," in r for r in readings) > 40
  clauses = [c for a in answers for c in re.findall(r"Shape \d (\w+) ([^.]+)\.", a.split(V5B.READING_END)[1])]
  for verb in V5B._CAPTION_VERBS:
    assert sum(v == verb for v, _ in clauses) > 100, verb
  lists = [re.split(r", | and ", said) for _, said in clauses]
  assert {len(x) for x in lists} == set(V5B._CAPTION_COUNTS)
  assert all(len(set(x)) == len(x) and set(x) <= set(V5B._CAPTION_ADJECTIVES) for x in lists)
  for word in V5B._CAPTION_ADJECTIVES:
    assert sum(word in x for x in lists) > 100, word
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  for options in (V5B._CAPTION_VERBS, V5B._CAPTION_ADJECTIVES, [f.split("{cell}")[0].split("}")[1] for f in V5B._CELL_FORMS]):
    firsts = [tok.encode(" " + o.strip()).ids[0] if o.strip() else None for o in options]
    assert len(set(firsts)) == len(firsts), options


def test_v5b_answer_lengths():
  """As v5's: about 96-192 tokens an answer, within the recipe's seq_len and ANSWER_TOKENS."""
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  n = [len(tok.encode(V5B.render("caption", "train", i)[2]).ids) for i in range(60)]
  assert 88 <= min(n) and max(n) <= 192 and 100 <= np.mean(n) <= 170, (min(n), max(n))
  assert max(n) + 60 <= V5B.TARGET_TRAIN["seq_len"] and max(n) < V5B.ANSWER_TOKENS


# --- suite v5c: v5b with forks in runs in every explanation --------------------------------------

V5C = suites.get("v5c")


def test_v5c_keeps_v5b_readings_and_images():
  """Every record shows v5b's scene and image with v5b's reading string for string; only the free
  part after READING_END differs, and the reading still scores every field right."""
  for task in V5C.TASKS:
    for split, i in (("heldout", 3), ("train", 11)):
      sb, imb, ab = V5B.record(task, split, i)
      s, im, a = V5C.record(task, split, i)
      assert s.content == sb.content and im.tobytes() == imb.tobytes()
      assert V5C.reading(a) == V5B.reading(ab) and a != ab, (task, a)
      sc = evaluate.score(task, V5C.reading(a), s)
      assert sc["all_hits"] == sc["all_n"] == len(s.fields), (task, a)


def test_v5c_clauses():
  """Over 200 answers a task: a grounded clause says two or three adjectives (both counts occur), a
  lines clause names its line's first and last word as read, a caption clause starts "It" and says
  five to seven; no clause repeats an adjective."""
  import re
  for task in V5C.TASKS:
    counts = set()
    for i in range(200):
      s, _, a = V5C.record(task, "train", i)
      free = a.split(V5C.READING_END)[1]
      if task == "caption":
        clauses = re.findall(r"It (is|looks|seems) ([^.]+)\.", free)
        assert len(clauses) == len(s.fields), a
      else:
        clauses = re.findall(r"(?:ow|ar|ine) [^.]*? (looks|seems|appears) ([^.]+)\.", free)
        assert len(clauses) == (4 if task == "lines" else len(s.fields)), a
      if task == "lines":
        named = re.findall(r"ine (\d) \((\w+), (\w+)\)", free)
        assert [(int(n), f, l) for n, f, l in named] == [(k + 1, s.fields[3 * k], s.fields[3 * k + 2]) for k in range(4)]
      for _, said in clauses:
        adj = re.split(r", | and ", said)
        assert len(set(adj)) == len(adj) and set(adj) <= set(V5B._CAPTION_ADJECTIVES), said
        counts.add(len(adj))
    assert counts == (set(V5C._CAPTION_COUNTS) if task == "caption" else set(V5C._GROUNDED_COUNTS)), (task, counts)


def test_v5c_answer_lengths():
  """About 96-192 tokens an answer (the shortest captions ~87), within seq_len and ANSWER_TOKENS."""
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  for task in V5C.TASKS:
    n = [len(tok.encode(V5C.render(task, "train", i)[2]).ids) for i in range(60)]
    assert 85 <= min(n) and max(n) <= 192 and 100 <= np.mean(n) <= 170, (task, min(n), max(n))
    assert max(n) + 60 <= V5C.TARGET_TRAIN["seq_len"] and max(n) < V5C.ANSWER_TOKENS


# --- suite v5d: v5c with the lines cut to forks and longer caption lists ---------------------------

V5D = suites.get("v5d")


def test_v5d_keeps_v5c_readings_table_and_images():
  """Every record shows v5c's scene, image and reading string for string; the table's whole answer
  is v5c's; the other tasks' free parts differ, and the reading still scores every field right."""
  for task in V5D.TASKS:
    for split, i in (("heldout", 5), ("train", 17)):
      sc_, imc, ac = V5C.record(task, split, i)
      s, im, a = V5D.record(task, split, i)
      assert s.content == sc_.content and im.tobytes() == imc.tobytes()
      assert V5D.reading(a) == V5C.reading(ac), (task, a)
      assert (a == ac) == (task == "table"), (task, a)
      sc = evaluate.score(task, V5D.reading(a), s)
      assert sc["all_hits"] == sc["all_n"] == len(s.fields), (task, a)


def test_v5d_clauses():
  """Over 200 answers a task: lines clauses are "Line k <verb> ..." in order with no connective and
  no word named; chart clauses say two to four adjectives; a caption says one clause a shape and one
  more, each six to eight adjectives with both gaps occurring; no clause repeats an adjective."""
  import re
  gaps = collections.Counter()
  for task in ("chart", "lines", "caption"):
    counts = set()
    for i in range(200):
      s, _, a = V5D.record(task, "train", i)
      free = a.split(V5D.READING_END)[1]
      if task == "caption":
        clauses = re.findall(r"It (is|looks|seems) ([^.]+)\.", free)
        assert len(clauses) == len(s.fields) + V5D._CAPTION_EXTRA, a
        gaps.update(re.findall(r", | and ", free))
      elif task == "lines":
        clauses = re.findall(r"Line (\d) (looks|seems|appears) ([^.]+)\.", free)
        assert [int(k) for k, _, _ in clauses] == [1, 2, 3, 4], a
        assert not any(c in free for c in ("Next", "Then", "Also", "(")), a
        clauses = [c[1:] for c in clauses]
      else:
        clauses = re.findall(r"ar [A-F] \(\d+\) (looks|seems|appears) ([^.]+)\.", free)
        assert len(clauses) == len(s.fields), a
      for _, said in clauses:
        adj = re.split(r", | and ", said)
        assert len(set(adj)) == len(adj) and set(adj) <= set(V5B._CAPTION_ADJECTIVES), said
        counts.add(len(adj))
    assert counts == set(V5D._COUNTS[task]), (task, counts)
  assert min(gaps.values()) > 0.4 * sum(gaps.values()), gaps


def test_v5d_answer_lengths():
  """Within seq_len and ANSWER_TOKENS (the lines' answers are the shortest, 77-104 tokens); against
  v5c's, the lines' free part is at least a quarter shorter and the caption's a fifth longer (the
  image test's gain is a mean over every position, so this is what moves it)."""
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  free = {}
  for version, suite in (("v5c", V5C), ("v5d", V5D)):
    for task in suite.TASKS:
      answers = [suite.render(task, "train", i)[2] for i in range(60)]
      n = [len(tok.encode(a).ids) for a in answers]
      free[version, task] = np.mean([len(tok.encode(a.split(suite.READING_END, 1)[1]).ids) for a in answers])
      if version == "v5d":
        assert 70 <= min(n) and max(n) <= 192, (task, min(n), max(n))
        assert max(n) + 60 <= V5D.TARGET_TRAIN["seq_len"] and max(n) < V5D.ANSWER_TOKENS
  assert free["v5d", "lines"] < 0.75 * free["v5c", "lines"] and free["v5d", "caption"] > 1.2 * free["v5c", "caption"], free
  assert free["v5d", "table"] == free["v5c", "table"]


# --- suite v5e: v5d with no lines opener and verbs of few pieces ----------------------------------

V5E = suites.get("v5e")


def test_v5e_keeps_v5d_readings_table_chart_and_images():
  """Every record shows v5d's scene, image and reading string for string; table and chart answers
  are v5d's whole; lines and caption free parts differ."""
  for task in V5E.TASKS:
    for split, i in (("heldout", 7), ("train", 23)):
      sd, imd, ad = V5D.record(task, split, i)
      s, im, a = V5E.record(task, split, i)
      assert s.content == sd.content and im.tobytes() == imd.tobytes()
      assert V5E.reading(a) == V5D.reading(ad), (task, a)
      assert (a == ad) == (task in ("table", "chart")), (task, a)


def test_v5e_lines_and_caption_clauses():
  """Over 200 answers: a lines answer goes from its reading straight to "Line 1", four clauses in
  order, two to four adjectives each; a caption says one clause a shape and one more; every clause's
  verb is "is" or "looks" (both occur), its gaps both occur, no adjective repeats in a clause."""
  import re
  verbs, gaps = collections.Counter(), collections.Counter()
  for task in ("lines", "caption"):
    counts = set()
    for i in range(200):
      s, _, a = V5E.record(task, "train", i)
      free = a.split(V5E.READING_END)[1]
      if task == "lines":
        assert free.startswith("Line 1 "), a
        clauses = re.findall(r"Line (\d) (\w+) ([^.]+)\.", free)
        assert [int(k) for k, _, _ in clauses] == [1, 2, 3, 4], a
        clauses = [c[1:] for c in clauses]
      else:
        clauses = re.findall(r"It (\w+) ([^.]+)\.", free)
        assert len(clauses) == len(s.fields) + V5D._CAPTION_EXTRA, a
      for verb, said in clauses:
        verbs[verb] += 1
        gaps.update(re.findall(r", | and ", said))
        adj = re.split(r", | and ", said)
        assert len(set(adj)) == len(adj) and set(adj) <= set(V5B._CAPTION_ADJECTIVES), said
        counts.add(len(adj))
    assert counts == set(V5E._LINES_COUNTS if task == "lines" else V5D._COUNTS["caption"]), (task, counts)
  assert set(verbs) == set(V5E._VERBS) and min(verbs.values()) > 0.4 * sum(verbs.values()), verbs
  assert min(gaps.values()) > 0.4 * sum(gaps.values()), gaps


def test_v5e_answer_lengths():
  """Within seq_len and ANSWER_TOKENS; the lines' free part shorter than v5d's, the verbs 1-2 pieces."""
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  assert [len(tok.encode(" " + v).ids) for v in V5E._VERBS] == [1, 2]
  free = {}
  for version, suite in (("v5d", V5D), ("v5e", V5E)):
    for task in ("lines", "caption"):
      answers = [suite.render(task, "train", i)[2] for i in range(60)]
      n = [len(tok.encode(a).ids) for a in answers]
      free[version, task] = np.mean([len(tok.encode(a.split(suite.READING_END, 1)[1]).ids) for a in answers])
      assert 60 <= min(n) and max(n) + 60 <= suite.TARGET_TRAIN["seq_len"] and max(n) < suite.ANSWER_TOKENS, (task, n)
  assert free["v5e", "lines"] < free["v5d", "lines"], free


# --- suite v5f: v5e with the lines one verb and lists of two or three -------------------------------

V5F = suites.get("v5f")


def _assert_only_lines_answers_move(new, old, at=(("heldout", 5), ("train", 31)), moved="lines"):
  """Every record of `new` shows `old`'s scene, image and reading; every answer but a `moved` task's
  is `old`'s string for string."""
  for task in new.TASKS:
    for split, i in at:
      so, imo, ao = old.record(task, split, i)
      s, im, a = new.record(task, split, i)
      assert s.content == so.content and im.tobytes() == imo.tobytes()
      assert new.reading(a) == old.reading(ao), (task, a)
      assert (a == ao) == (task != moved), (task, a)


def test_v5f_moves_only_the_lines_free_part():
  _assert_only_lines_answers_move(V5F, V5E)


def test_v5f_lines_clauses():
  """Over 200 lines answers: four clauses "Line k is ...", in order, each two or three adjectives
  without repeats (both counts occur), both gaps occur, then one of v5's closers; fewer tokens than
  v5e's free part and still within seq_len and ANSWER_TOKENS."""
  import re
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  counts, gaps, free = collections.Counter(), collections.Counter(), {"v5e": [], "v5f": []}
  for i in range(200):
    a = V5F.record("lines", "train", i)[2]
    rest = a.split(V5F.READING_END)[1]
    clauses = re.findall(r"Line (\d) (\w+) ([^.]+)\. ", rest)
    assert [int(k) for k, _, _ in clauses] == [1, 2, 3, 4] and {v for _, v, _ in clauses} == {"is"}, a
    assert rest.split(". ", 4)[-1] in V5._EXPLAIN["lines"]["close"], a
    for _, _, said in clauses:
      gaps.update(re.findall(r", | and ", said))
      adj = re.split(r", | and ", said)
      assert len(set(adj)) == len(adj) and set(adj) <= set(V5B._CAPTION_ADJECTIVES), said
      counts[len(adj)] += 1
    if i < 60:
      for version, suite in (("v5e", V5E), ("v5f", V5F)):
        answer = suite.render("lines", "train", i)[2]
        n = len(tok.encode(answer).ids)
        assert n + 60 <= suite.TARGET_TRAIN["seq_len"] and n < suite.ANSWER_TOKENS, n
        free[version].append(len(tok.encode(answer.split(suite.READING_END, 1)[1]).ids))
  assert set(counts) == set(V5F._LINES_COUNTS) and min(counts.values()) > 0.4 * sum(counts.values()), counts
  assert min(gaps.values()) > 0.4 * sum(gaps.values()), gaps
  assert np.mean(free["v5f"]) < np.mean(free["v5e"]), free


# --- suite v5g: v5f with the lines' lists two to four adjectives -----------------------------------

V5G = suites.get("v5g")


def test_v5g_lines_lists_two_to_four_and_nothing_else_moves():
  """Every record shows v5f's scene, image and reading, every answer but a lines answer is v5f's;
  over 200 lines answers the clauses are v5f's form with two to four adjectives (each count occurs)."""
  import re
  for task in V5G.TASKS:
    sf, imf, af = V5F.record(task, "heldout", 9)
    s, im, a = V5G.record(task, "heldout", 9)
    assert s.content == sf.content and im.tobytes() == imf.tobytes() and V5G.reading(a) == V5F.reading(af)
    assert (a == af) == (task != "lines"), (task, a)
  counts = collections.Counter()
  for i in range(200):
    rest = V5G.record("lines", "train", i)[2].split(V5G.READING_END)[1]
    clauses = re.findall(r"Line (\d) is ([^.]+)\. ", rest)
    assert [int(k) for k, _ in clauses] == [1, 2, 3, 4], rest
    counts.update(len(re.split(r", | and ", said)) for _, said in clauses)
  assert set(counts) == {2, 3, 4} and min(counts.values()) > 0.25 * sum(counts.values()), counts


# --- suite v5h: v5g with the lines read in their clauses and every lines fork unequal ----------------

V5H = suites.get("v5h")


def test_v5h_moves_only_the_lines_answers():
  """The lines' reading, parsed from their clauses, is v5g's reading block word for word."""
  _assert_only_lines_answers_move(V5H, V5G, at=(("heldout", 7), ("train", 40)))


def test_v5h_lines_clauses_and_unequal_forks():
  """Over 400 lines answers: four clauses "Line k: w w w, <2-4 adjectives>." in order, then a closer;
  no reading block; each fork's options drawn at their unequal chances (gaps ", " over " and ", the
  first adjective's weight over the last's, "That is all." over "That is the text." over "No line is
  left out."), so the target learns a margin at every fork; within seq_len and ANSWER_TOKENS."""
  import re
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  counts, gaps, adj_n, closers = (collections.Counter() for _ in range(4))
  for i in range(400):
    s, _, a = V5H.record("lines", "train", i)
    assert V5H.READING_END not in a, a
    clauses = re.findall(r"Line (\d): (\S+ \S+ \S+), ([^.]+)\. ", a)
    assert [int(k) for k, _, _ in clauses] == [1, 2, 3, 4], a
    assert " ".join(w for _, w, _ in clauses).split() == list(s.fields), a
    closers[a.split(". ", 4)[-1]] += 1
    for _, _, said in clauses:
      gaps.update(re.findall(r", | and ", said))
      adj = re.split(r", | and ", said)
      assert len(set(adj)) == len(adj) and set(adj) <= set(V5H._ADJECTIVES), said
      counts[len(adj)] += 1
      adj_n.update(adj)
    if i < 60:
      n = len(tok.encode(a).ids)
      assert 60 <= n and n + 60 <= V5H.TARGET_TRAIN["seq_len"] and n < V5H.ANSWER_TOKENS, n
  assert set(counts) == {2, 3, 4} and min(counts.values()) > 0.25 * sum(counts.values()), counts
  assert gaps[", "] > 1.1 * gaps[" and "], gaps
  first, last = V5H._ADJECTIVES[0], V5H._ADJECTIVES[-1]
  assert adj_n[first] > 1.3 * adj_n[last], adj_n
  assert closers["That is all."] > closers["That is the text."] > closers["No line is left out."], closers


# --- suite v5i: v5h's lines with each line led by its words, as v5g's reading block had them --------

V5I = suites.get("v5i")


def test_v5i_moves_only_the_lines_answers():
  _assert_only_lines_answers_move(V5I, V5G, at=(("heldout", 11), ("train", 44)))


def test_v5i_lines_lead_each_line_with_its_words():
  """Over 200 lines answers: four lines "w w w: <2-4 adjectives>." with the scene's words in order,
  then a closer line; each line's words are tokenised as v5g's reading block tokenises them (a
  line's first word without its leading-space piece), so the target reads where it learned to."""
  import re
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  for i in range(200):
    s, _, a = V5I.record("lines", "train", i)
    *lines, closer = a.split("\n")
    assert closer in V5I._CLOSERS and len(lines) == 4, a
    parts = [re.fullmatch(r"(\S+ \S+ \S+): ([^.]+)\.", line) for line in lines]
    assert all(parts) and " ".join(p[1] for p in parts).split() == list(s.fields), a
    for p in parts:
      adj = re.split(r", | and ", p[2])
      assert 2 <= len(adj) <= 4 and len(set(adj)) == len(adj) and set(adj) <= set(V5I._ADJECTIVES), a
    if i < 20:
      ref = tok.encode(V5G.record("lines", "train", i)[2].split(V5G.READING_END)[0]).tokens
      got = tok.encode(a).tokens
      for p in parts:
        words = tok.encode(p[1]).tokens
        assert any(ref[j:j + len(words)] == words for j in range(len(ref))), (words, ref)
        assert any(got[j:j + len(words)] == words for j in range(len(got))), (words, got)
      assert len(got) < V5I.ANSWER_TOKENS


# --- suite v5j: v5g with the lines' answers opened by "Read:" ------------------------------------------

V5J = suites.get("v5j")


def test_v5j_opens_the_lines_and_moves_nothing_else():
  """Every record shows v5g's scene, image and reading; a lines answer is v5g's after "Read:\\n" (its
  first three tokens: "Read", ":", "\\n", then v5g's tokens), every other answer is v5g's."""
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  _assert_only_lines_answers_move(V5J, V5G, at=(("heldout", 13), ("train", 47)))
  for i in range(20):
    a, ag = V5J.record("lines", "train", i)[2], V5G.record("lines", "train", i)[2]
    assert a == V5J.LINES_OPENER + ag and V5J.reading(a) == V5G.reading(ag)
    assert tok.encode(a).tokens == ["Read", ":", "Ċ"] + tok.encode(ag).tokens


# --- suite v5k: v5j with the lines' lists of two to five adjectives ------------------------------------

V5K = suites.get("v5k")


def _lines_list_lengths(suite, n: int) -> collections.Counter:
  """How many adjectives each clause of `suite`'s first n lines training answers lists, checking on
  the way that each answer keeps v5j's opener and reading and says Line 1 to Line 4 in order."""
  import re
  counts = collections.Counter()
  for i in range(n):
    a = suite.record("lines", "train", i)[2]
    assert a.startswith(V5J.LINES_OPENER) and suite.reading(a) == V5J.reading(V5J.record("lines", "train", i)[2])
    clauses = re.findall(r"Line (\d) is ([^.]+)\. ", a.split(suite.READING_END)[1])
    assert [int(k) for k, _ in clauses] == [1, 2, 3, 4], a
    counts.update(len(re.split(r", | and ", said)) for _, said in clauses)
  return counts


def test_v5k_lines_lists_two_to_five_and_nothing_else_moves():
  """Every record shows v5j's scene, image and reading, every answer but a lines answer is v5j's; a
  lines answer keeps v5j's opener and reading, and over 300 its clauses say two to five adjectives."""
  _assert_only_lines_answers_move(V5K, V5J, at=(("heldout", 17), ("train", 51)))
  counts = _lines_list_lengths(V5K, 300)
  assert set(counts) == {2, 3, 4, 5} and min(counts.values()) > 0.2 * sum(counts.values()), counts


# --- suite v5l: v5j with the lines' lists of two to four, four at twice the chance --------------------

V5L = suites.get("v5l")


def test_v5l_lines_lists_lean_to_four_and_nothing_else_moves():
  """Every record shows v5j's scene, image and reading, every answer but a lines answer is v5j's; a
  lines answer keeps v5j's opener and reading, and over 400 its clauses say two to four adjectives,
  four about twice as often as two or three."""
  _assert_only_lines_answers_move(V5L, V5J, at=(("heldout", 19), ("train", 53)))
  counts = _lines_list_lengths(V5L, 400)
  n = sum(counts.values())
  assert set(counts) == {2, 3, 4}, counts
  assert 0.2 < counts[2] / n < 0.3 and 0.2 < counts[3] / n < 0.3 and 0.45 < counts[4] / n < 0.55, counts


# --- suite v5m: v5l with the caption's sentences bare adjective lists -------------------------------

V5M = suites.get("v5m")


def test_v5m_caption_sentences_are_bare_lists_and_nothing_else_moves():
  """Every record shows v5l's scene, image and reading, every answer but a caption answer is v5l's; a
  caption answer's free part is an opener, one sentence of six to eight adjectives a shape and one
  more, then a closer, with no "It" and no verb; every answer fits ANSWER_TOKENS."""
  import re
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(paths.TARGET / "tokenizer.json"))
  _assert_only_lines_answers_move(V5M, V5L, at=(("heldout", 21), ("train", 55)), moved="caption")
  adjectives = set(V5B._CAPTION_ADJECTIVES)
  for i in range(100):
    s, _, a = V5M.record("caption", "train", i)
    free = a.split(V5M.READING_END)[1]
    assert "It " not in free and " looks" not in free and " is " not in free.split(". ")[-2], a
    sentences = free.split(". ")
    assert len(sentences) == len(s.fields) + 2, a          # opener + first list, the other lists, closer
    lists = [sentences[0].split(": ", 1)[1]] + sentences[1:-1]
    for said in lists:
      words = [w.lower() for w in re.split(r", | and ", said.rstrip("."))]
      assert 6 <= len(words) <= 8 and set(words) <= adjectives and len(set(words)) == len(words), (said, a)
    assert len(tok.encode(a).tokens) < V5M.ANSWER_TOKENS
