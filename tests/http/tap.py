"""TAP-style check lines shared by the HTTP test clients (protocol.py, ws.py): the shell
driver counts "ok -" / "not ok -" lines."""
import sys

FAILS = 0


def ok(name, cond, detail=""):
    global FAILS
    if cond:
        print("ok - " + name)
    else:
        FAILS += 1
        print("not ok - " + name)
        if detail:
            print("#   " + str(detail)[:600].replace("\n", "\n#   "))
    sys.stdout.flush()
