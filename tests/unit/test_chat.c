/* Chat templates: exact output of each template, template detection, bad input. */
#include "harness.h"

#include "larql/chat.h"

static const lq_chat_msg CONV[] = {
    {"system", "You are helpful."},
    {"user", "  Hi there!\n"},
    {"assistant", "Hello."},
    {"user", "What is 2+2?"},
};

static void expect_render(int tmpl, const lq_chat_msg *m, size_t n, int add, const char *want)
{
    char *out = NULL;
    lq_err err = {0};
    int rc = lq_chat_render(tmpl, m, n, add, &out, &err);
    CHECK_MSG(rc == LQ_OK, "render: %s", err.msg);
    CHECK_MSG(out && strcmp(out, want) == 0, "template %s\n got: [%s]\nwant: [%s]",
              lq_chat_template_name(tmpl), out ? out : "(null)", want);
    free(out);
}

static void test_plain(void)
{
    expect_render(LQ_CHAT_PLAIN, CONV, 4, 1,
                  "System: You are helpful.\n"
                  "User:   Hi there!\n\n"
                  "Assistant: Hello.\n"
                  "User: What is 2+2?\n"
                  "Assistant: ");
    expect_render(LQ_CHAT_PLAIN, CONV + 3, 1, 0, "User: What is 2+2?\n");
}

static void test_llama3(void)
{
    expect_render(LQ_CHAT_LLAMA3, CONV, 4, 1,
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_render(LQ_CHAT_LLAMA3, CONV + 1, 1, 0,
                  "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>");
}

static void test_bitnet(void)
{
    expect_render(LQ_CHAT_BITNET, CONV, 4, 1,
                  "System: You are helpful.<|eot_id|>"
                  "User: Hi there!<|eot_id|>"
                  "Assistant: Hello.<|eot_id|>"
                  "User: What is 2+2?<|eot_id|>"
                  "Assistant: ");
    expect_render(LQ_CHAT_BITNET, CONV + 2, 1, 0, "Assistant: Hello.<|eot_id|>");
}

static void test_null_and_blank_content(void)
{
    const lq_chat_msg m[] = {{"user", NULL}, {"assistant", " \t\n"}};
    expect_render(LQ_CHAT_PLAIN, m, 2, 1, "User: \nAssistant:  \t\n\nAssistant: ");
    expect_render(LQ_CHAT_BITNET, m, 2, 1, "User: <|eot_id|>Assistant: <|eot_id|>Assistant: ");
    expect_render(LQ_CHAT_LLAMA3, m, 2, 0,
                  "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>");
}

static void test_bad_input(void)
{
    char *out = (char *)1;
    lq_err err = {0};
    CHECK_EQ_INT(lq_chat_render(LQ_CHAT_PLAIN, CONV, 0, 1, &out, &err), LQ_EINVAL);
    CHECK(out == NULL);
    CHECK_STR_CONTAINS(err.msg, "no messages");
    const lq_chat_msg bad[] = {{"user", "a"}, {"tool", "b"}};
    for (int t = LQ_CHAT_PLAIN; t <= LQ_CHAT_BITNET; t++) {
        out = (char *)1;
        CHECK_EQ_INT(lq_chat_render(t, bad, 2, 1, &out, &err), LQ_EINVAL);
        CHECK(out == NULL);
        CHECK_STR_CONTAINS(err.msg, "unknown role 'tool'");
        CHECK_STR_CONTAINS(err.msg, "message 1");
    }
    const lq_chat_msg upper[] = {{"User", "a"}};
    CHECK_EQ_INT(lq_chat_render(LQ_CHAT_PLAIN, upper, 1, 1, &out, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "unknown role 'User'");
    const lq_chat_msg norole[] = {{NULL, "a"}};
    CHECK_EQ_INT(lq_chat_render(LQ_CHAT_PLAIN, norole, 1, 1, &out, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "no role");
    CHECK_EQ_INT(lq_chat_render(LQ_CHAT_PLAIN, NULL, 2, 1, &out, &err), LQ_EINVAL);
    CHECK_EQ_INT(lq_chat_render(99, CONV, 1, 1, &out, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "unknown template 99");
    CHECK_EQ_INT(lq_chat_render(LQ_CHAT_PLAIN, CONV, 1, 1, NULL, &err), LQ_EINVAL);
}

static void test_names(void)
{
    CHECK_EQ_INT(lq_chat_template_from_name("plain"), LQ_CHAT_PLAIN);
    CHECK_EQ_INT(lq_chat_template_from_name("llama3"), LQ_CHAT_LLAMA3);
    CHECK_EQ_INT(lq_chat_template_from_name("BitNet"), LQ_CHAT_BITNET);
    CHECK_EQ_INT(lq_chat_template_from_name("chatml"), -1);
    CHECK_EQ_INT(lq_chat_template_from_name(NULL), -1);
    for (int t = LQ_CHAT_PLAIN; t <= LQ_CHAT_BITNET; t++)
        CHECK_EQ_INT(lq_chat_template_from_name(lq_chat_template_name(t)), t);
    CHECK(strcmp(lq_chat_template_name(0), "unknown") == 0);
}

static void test_detect(void)
{
    const char *l3 = "{% set loop_messages = messages %}{% for message in loop_messages %}"
                     "{% set content = '<|start_header_id|>' + message['role'] + "
                     "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}";
    const char *bn = "{% for message in messages %}{{ message['role'] | capitalize + ': ' + "
                     "message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
                     "{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}";
    const char *other = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}";
    /* the template string wins over the architecture */
    CHECK_EQ_INT(lq_chat_template_detect(l3, strlen(l3), "bitnet-b1.58", 1, 1), LQ_CHAT_LLAMA3);
    CHECK_EQ_INT(lq_chat_template_detect(bn, strlen(bn), "llama", 1, 1), LQ_CHAT_BITNET);
    /* an unrecognised template falls back to the architecture rule */
    CHECK_EQ_INT(lq_chat_template_detect(other, strlen(other), "bitnet-b1.58", 1, 1),
                 LQ_CHAT_BITNET);
    CHECK_EQ_INT(lq_chat_template_detect(NULL, 0, "bitnet", 1, 0), LQ_CHAT_BITNET);
    CHECK_EQ_INT(lq_chat_template_detect(NULL, 0, "bitnet-b1.58", 0, 0), LQ_CHAT_PLAIN);
    CHECK_EQ_INT(lq_chat_template_detect(NULL, 0, "llama", 1, 1), LQ_CHAT_LLAMA3);
    CHECK_EQ_INT(lq_chat_template_detect(NULL, 0, "llama", 0, 0), LQ_CHAT_PLAIN);
    CHECK_EQ_INT(lq_chat_template_detect(NULL, 0, "gpt2", 1, 1), LQ_CHAT_PLAIN);
    CHECK_EQ_INT(lq_chat_template_detect(NULL, 0, NULL, 1, 1), LQ_CHAT_PLAIN);
    /* the template is not NUL-terminated: only tmpl_len bytes count */
    CHECK_EQ_INT(lq_chat_template_detect(l3, 10, "gpt2", 0, 0), LQ_CHAT_PLAIN);
}

int main(void)
{
    RUN(test_plain);
    RUN(test_llama3);
    RUN(test_bitnet);
    RUN(test_null_and_blank_content);
    RUN(test_bad_input);
    RUN(test_names);
    RUN(test_detect);
    return harness_done();
}
