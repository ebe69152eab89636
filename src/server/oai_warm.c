/* The prompt cache's next turn (issue 26). After a generation, the cache holds the KV of the
 * prompt and of the tokens the model generated. A chat client sends the next turn as text:
 * the prompt, the answer as it was sent (invalid UTF-8 already replaced by U+FFFD), the new
 * message. That text tokenizes again to tokens that often differ from the generated ones (a
 * random model's byte garbage becomes several tokens per U+FFFD; a trained model's " " + "Once"
 * comes back as " Once"), and the cache reuses only a common token prefix, so the next turn
 * would prefill the whole answer again. Here the text the client holds is tokenized as its
 * next request will be and handed to lq_scheduler_warm, which prefills the differing tail
 * into the cache while the server is idle (or while the next request waits for it). The next
 * turn's answer is the same as without it: its KV is the one its own prefill would compute. */
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "server/internal.h"

void srv_warm_next_turn(lq_scheduler *sc, const lq_tokenizer *tok, unsigned flags, const char *prompt,
                        size_t plen, const char *sent, size_t slen)
{
    if (!sc || !tok || !prompt)
        return;
    size_t al = 0;
    char *ans = lq_utf8_lossy(sent ? sent : "", sent ? slen : 0, &al);
    char *all = ans ? malloc(plen + al + 1) : NULL;
    if (!all) {
        free(ans);
        return; /* out of memory: only a missed speed-up */
    }
    memcpy(all, prompt, plen);
    memcpy(all + plen, ans, al);
    all[plen + al] = 0;
    free(ans);
    int32_t *ids = NULL;
    size_t n = 0;
    lq_err err = {0};
    /* the last token may merge with what the client appends next (".\n"): left out */
    if (!lq_tokenizer_encode(tok, all, plen + al, flags, &ids, &n, &err) && n > 2)
        lq_scheduler_warm(sc, ids, n - 1, &err); /* refused (busy): only a missed speed-up */
    free(ids);
    free(all);
}
