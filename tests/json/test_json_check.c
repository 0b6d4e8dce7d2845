/* tests/json/test_json_check.c — the check of text copied verbatim into a JSON output
 * (src/json/check.c): the traceback tables that etr convert and etr repair take from files.
 * Whatever passes must parse as JSON once put where they put it (checked with jansson). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "json/check.h"

static bool elements(const char *s) { return etr__json_elements_ok(s, strlen(s)); }
static bool members(const char *s) { return etr__json_members_ok(s, strlen(s)); }

/* The verdict agrees with jansson on the text in its place: [text] and {text "z": 0}. */
static void agrees(const char *s) {
  char buf[512];
  json_error_t e;
  snprintf(buf, sizeof buf, "[%s]", s);
  json_t *a = json_loads(buf, JSON_DECODE_ANY, &e);
  if ((a != NULL) != elements(s))
    fail_msg("elements %s: jansson %d, ours %d", s, a != NULL, elements(s));
  json_decref(a);
  snprintf(buf, sizeof buf, "{%s \"z\": 0}", s);
  json_t *o = json_loads(buf, 0, &e);
  bool ours = members(s) && (s[0] == '\0' || strrchr(s, ',') > strrchr(s, ':'));
  if (o != NULL && !members(s)) fail_msg("members %s: jansson parses it, ours refuses", s);
  if (o == NULL && ours) fail_msg("members %s: ours takes it, jansson does not parse", s);
  json_decref(o);
}

static void test_elements(void **state) {
  (void)state;
  assert_true(elements(""));
  assert_true(elements("\n    {\"name\": \"f\", \"filename\": \"a.c\", \"line\": 3}"));
  assert_true(elements("[0,1,2],\n    [],[3]"));
  assert_true(elements("\"a\\u00e9\\n\", -1.5e3, true, false, null"));
  const char *bad[] = {"]",         "[1,2]]",      "[1,2],",    ",[1]",
                       "{\"a\": 1", "\"abc",       "[1 2]",     "01",
                       "1.",        "-",           "tru",       "{\"a\" 1}",
                       "{1: 2}",    "\"\\x\"",     "\"\\u12\"", "[1]]}, \"x\": [",
                       "\"a\001\"", "{\"a\": 1,}", "[1,]"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (elements(bad[i])) fail_msg("elements: took %s", bad[i]);
    agrees(bad[i]);
  }
  char deep[64];
  memset(deep, '[', 40);
  memset(deep + 40, ']', 20);
  deep[60] = '\0';
  assert_false(elements(deep)); /* unbalanced, and deeper than the limit */
}

static void test_members(void **state) {
  (void)state;
  assert_true(members(""));
  assert_true(members("\"frames\": [\n  ],\n  \"tracebacks\": [[0]],\n  "));
  assert_false(members("\"frames\": [], \"x\": ]"));
  assert_false(members("\"frames\": []}, \"evil\": {"));
  assert_false(members("[1]"));
  assert_false(members("\"a\" 1"));
  agrees("\"frames\": [], ");
  agrees("\"frames\": [}, ");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_elements),
                                     cmocka_unit_test(test_members)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
