package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/layer0ai/layer0/internal/spend"
)

const spendUsage = `usage: layer0 spend [--url ADMIN_URL] [--key KEY] [--json]

Prints what each key and team spent and has left: every budget's amount, spending, reservations
of requests in flight, what is left and when it resets (as the budget ledger holds them, shared
by every replica on Redis), and each key's cost, tokens and requests on the replica asked since
it started (docs/spend.md).

It reads GET /spend on the admin listener (server.admin_addr). Without an admin address the main
listener serves it to admin keys (keys[].admin): pass one with --key.

Flags:
`

// runSpend implements `layer0 spend`.
func runSpend(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("spend", spendUsage, stderr)
	g := addGatewayFlags(fs, "base URL of the gateway's admin listener, or of the main one with --key",
		"an admin API key, for the main listener (default $LAYER0_API_KEY)", "print the report as JSON", 10*time.Second)
	if _, err := g.parse(fs, args, 0, spendUsage); err != nil {
		return err
	}
	body, _, err := adminGet(&http.Client{Timeout: *g.timeout}, "spend", g.base+"/spend", *g.key)
	if err != nil {
		return err
	}
	var rep spend.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("spend: the gateway did not answer a spend report: %w", err)
	}
	if *g.asJSON {
		return printJSON(stdout, rep)
	}
	return printSpend(stdout, &rep)
}

// printSpend writes the report as a table: one line per budget, then one per key.
func printSpend(w io.Writer, rep *spend.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SCOPE\tBUDGET\tSPENT\tRESERVED\tLEFT\tRESETS\n")
	row := func(scope string, b spend.BudgetState) {
		span := "per " + b.Period
		if b.Period == "" {
			span = "per rolling " + b.Window
		}
		unit := rep.Currency
		if b.Unit == "tokens" {
			unit = "tokens"
		}
		fmt.Fprintf(tw, "%s\t%s %s %s\t%s\t%s\t%s\t%s\n", scope, b.Limit, unit, span, b.Spent, b.Reserved, b.Left,
			b.Resets.Format(time.RFC3339))
	}
	for _, b := range rep.Global {
		row("global", b)
	}
	for _, t := range rep.Teams {
		for _, b := range t.Budgets {
			row("team "+t.Name, b)
		}
	}
	for _, k := range rep.Keys {
		for _, b := range k.Budgets {
			row("key "+k.Name, b)
		}
	}
	fmt.Fprintf(tw, "\nKEY\tTEAM\tCOST (%s, this replica)\tTOKENS\tREQUESTS\n", rep.Currency)
	for _, k := range rep.Keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", k.Name, orDash(k.Team), k.Cost, k.Tokens, k.Requests)
	}
	return tw.Flush()
}
