/* Stop-string matcher: held-back prefixes, matches split across pieces, overlapping stop
 * strings, chunking independence, bad input. */
#include "harness.h"

#include "larql/generate.h"

/* Feeds pieces; returns the concatenated emitted text (static buffer) and the stop flag. */
static const char *feed(const char *const *stop, size_t n_stop, const char *const *pieces,
                        size_t n_pieces, int *stopped)
{
    static char acc[32768];
    size_t n = 0;
    lq_stopper *st = NULL;
    lq_err err = {0};
    *stopped = -1;
    acc[0] = 0;
    if (lq_stopper_create(stop, n_stop, &st, &err) != LQ_OK) {
        CHECK_MSG(0, "create: %s", err.msg);
        return acc;
    }
    *stopped = 0;
    for (size_t i = 0; i < n_pieces; i++) {
        const char *o;
        size_t ol;
        int r = lq_stopper_push(st, pieces[i], strlen(pieces[i]), &o, &ol);
        CHECK(n + ol < sizeof acc);
        memcpy(acc + n, o, ol);
        n += ol;
        if (r) {
            *stopped = 1;
            /* after a stop, further pushes emit nothing */
            r = lq_stopper_push(st, "more", 4, &o, &ol);
            CHECK_EQ_INT(r, 1);
            CHECK_EQ_INT(ol, 0);
            break;
        }
    }
    if (!*stopped) {
        const char *o;
        size_t ol;
        lq_stopper_flush(st, &o, &ol);
        memcpy(acc + n, o, ol);
        n += ol;
    }
    acc[n] = 0;
    lq_stopper_free(st);
    return acc;
}

static void test_split_across_pieces(void)
{
    const char *stop[] = {"lo Wo"};
    const char *pieces[] = {"Hel", "lo W", "orld"};
    int stopped;
    const char *t = feed(stop, 1, pieces, 3, &stopped);
    CHECK_EQ_INT(stopped, 1);
    CHECK(strcmp(t, "Hel") == 0);
}

static void test_held_back_then_released(void)
{
    /* "lo" is held after "Hel"+"lo" (prefix of "lo Wo"); "lo X" proves it is not a stop. */
    const char *stop[] = {"lo Wo"};
    lq_stopper *st = NULL;
    CHECK_EQ_INT(lq_stopper_create(stop, 1, &st, NULL), LQ_OK);
    const char *o;
    size_t ol;
    CHECK_EQ_INT(lq_stopper_push(st, "Hello", 5, &o, &ol), 0);
    CHECK_EQ_INT(ol, 3);
    CHECK(memcmp(o, "Hel", 3) == 0);
    CHECK_EQ_INT(lq_stopper_push(st, " ", 1, &o, &ol), 0);
    CHECK_EQ_INT(ol, 0); /* "lo " still a prefix */
    CHECK_EQ_INT(lq_stopper_push(st, "X", 1, &o, &ol), 0);
    CHECK_EQ_INT(ol, 4);
    CHECK(memcmp(o, "lo X", 4) == 0);
    CHECK_EQ_INT(lq_stopper_push(st, "l", 1, &o, &ol), 0);
    CHECK_EQ_INT(ol, 0);
    lq_stopper_flush(st, &o, &ol); /* end of stream: the held "l" is emitted */
    CHECK_EQ_INT(ol, 1);
    CHECK(memcmp(o, "l", 1) == 0);
    lq_stopper_free(st);
}

static void test_many_pieces_byte_by_byte(void)
{
    const char *text = "The quick brown fox jumps over the lazy dog. END and more";
    const char *stop[] = {"END", "dog!"};
    static char one[128][2];
    const char *pieces[128];
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++) {
        one[i][0] = text[i];
        one[i][1] = 0;
        pieces[i] = one[i];
    }
    int stopped;
    const char *t = feed(stop, 2, pieces, n, &stopped);
    CHECK_EQ_INT(stopped, 1);
    CHECK(strcmp(t, "The quick brown fox jumps over the lazy dog. ") == 0);
    /* same text in one piece and in uneven chunks gives the same result */
    const char *whole[] = {text};
    CHECK(strcmp(feed(stop, 2, whole, 1, &stopped), "The quick brown fox jumps over the lazy dog. ") == 0);
    const char *chunks[] = {"The quick brown fox jumps over the lazy do", "g", ". E", "N", "D and"};
    CHECK(strcmp(feed(stop, 2, chunks, 5, &stopped), "The quick brown fox jumps over the lazy dog. ") == 0);
}

static void test_overlapping_stop_strings(void)
{
    /* "bc" ends before "abcd" does: it wins however the text is cut. */
    const char *stop[] = {"abcd", "bc"};
    const char *whole[] = {"xabcdy"};
    const char *bytes[] = {"x", "a", "b", "c", "d", "y"};
    const char *two[] = {"xab", "cdy"};
    int s1, s2, s3;
    const char *t1 = feed(stop, 2, whole, 1, &s1);
    CHECK(strcmp(t1, "xa") == 0);
    const char *t2 = feed(stop, 2, bytes, 6, &s2);
    CHECK(strcmp(t2, "xa") == 0);
    const char *t3 = feed(stop, 2, two, 2, &s3);
    CHECK(strcmp(t3, "xa") == 0);
    CHECK(s1 == 1 && s2 == 1 && s3 == 1);
    /* same end: the longer (earlier-starting) one wins */
    const char *stop2[] = {"cd", "bcd"};
    const char *p2[] = {"ab", "cd"};
    CHECK(strcmp(feed(stop2, 2, p2, 2, &s1), "a") == 0);
    /* self-overlapping stop string: "aab" inside "aaab" */
    const char *stop3[] = {"aab"};
    const char *p3[] = {"a", "a", "a", "b", "c"};
    CHECK(strcmp(feed(stop3, 1, p3, 5, &s1), "a") == 0);
    CHECK_EQ_INT(s1, 1);
}

static void test_stop_inside_longer_held_prefix(void)
{
    /* "abc" is held as a prefix of "abcdef"; then "cd" completes inside it. */
    const char *stop[] = {"abcdef", "cd"};
    const char *p[] = {"xx", "abc", "d", "ef"};
    int stopped;
    CHECK(strcmp(feed(stop, 2, p, 4, &stopped), "xxab") == 0);
    CHECK_EQ_INT(stopped, 1);
    /* the long one completes when nothing shorter does */
    const char *stop2[] = {"abcdef", "zz"};
    const char *p2[] = {"1ab", "cde", "f2"};
    CHECK(strcmp(feed(stop2, 2, p2, 3, &stopped), "1") == 0);
    CHECK_EQ_INT(stopped, 1);
}

static void test_no_stop_strings_passes_through(void)
{
    const char *p[] = {"a", "", "bc", "\xe2\x82", "\xac"};
    int stopped;
    CHECK(strcmp(feed(NULL, 0, p, 5, &stopped), "abc\xe2\x82\xac") == 0);
    CHECK_EQ_INT(stopped, 0);
    /* not-a-stop near misses are all emitted, including at the very end */
    const char *stop[] = {"</s>"};
    const char *q[] = {"a<", "/", "x", " </", "s"};
    CHECK(strcmp(feed(stop, 1, q, 5, &stopped), "a</x </s") == 0);
    CHECK_EQ_INT(stopped, 0);
}

static void test_stop_at_start_and_utf8(void)
{
    const char *stop[] = {"\xc3\xa9t\xc3\xa9"}; /* "été" */
    const char *p[] = {"\xc3", "\xa9", "t\xc3\xa9 chaud"};
    int stopped;
    CHECK(strcmp(feed(stop, 1, p, 3, &stopped), "") == 0);
    CHECK_EQ_INT(stopped, 1);
    const char *p2[] = {"un ", "\xc3\xa9", "t\xc3\xa9"};
    CHECK(strcmp(feed(stop, 1, p2, 3, &stopped), "un ") == 0);
}

static void test_long_text_grows_buffer(void)
{
    static char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const char *stop[] = {"xxxxxxxxxxy"};
    const char *p[] = {big, big, "xxy tail"};
    int stopped;
    const char *t = feed(stop, 1, p, 3, &stopped);
    CHECK_EQ_INT(stopped, 1);
    CHECK_EQ_INT(strlen(t), 2 * 4999 + 2 - 10 + 0);
}

static void test_bad_input(void)
{
    lq_stopper *st = (lq_stopper *)1;
    lq_err err = {0};
    const char *empty[] = {"ok", ""};
    CHECK_EQ_INT(lq_stopper_create(empty, 2, &st, &err), LQ_EINVAL);
    CHECK(st == NULL);
    CHECK_STR_CONTAINS(err.msg, "stop string 1 is empty");
    const char *nul[] = {NULL};
    CHECK_EQ_INT(lq_stopper_create(nul, 1, &st, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "NULL");
    CHECK_EQ_INT(lq_stopper_create(NULL, 3, &st, &err), LQ_EINVAL);
    CHECK_EQ_INT(lq_stopper_create(NULL, 0, NULL, &err), LQ_EINVAL);
    lq_stopper_free(NULL);
}

int main(void)
{
    RUN(test_split_across_pieces);
    RUN(test_held_back_then_released);
    RUN(test_many_pieces_byte_by_byte);
    RUN(test_overlapping_stop_strings);
    RUN(test_stop_inside_longer_held_prefix);
    RUN(test_no_stop_strings_passes_through);
    RUN(test_stop_at_start_and_utf8);
    RUN(test_long_text_grows_buffer);
    RUN(test_bad_input);
    return harness_done();
}
