package cmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/scenarios"
)

// A lost answer: the request crosses the network untouched (one arrow, from
// Ada to the server), the answer stops at the network where the fault
// strikes (✕), and the client's timeout comes from the network.
func lostAnswer() scenarios.PhaseReport {
	return scenarios.PhaseReport{
		Title: "without protection: a transaction, but no idempotency key",
		Events: []scenarios.Event{
			{Kind: scenarios.KindStep, Text: "Ada sends ₦10,000 to Bola; the first response is lost"},
			{Kind: scenarios.KindSend, From: "Ada", To: "network", Delivery: 1, Text: "attempt 1: POST ₦10,000, key 5a758367-56b2-42f7-bff1-05e9c337f678"},
			{Kind: scenarios.KindArrive, From: "network", To: "server", Delivery: 1, Text: "POST ₦10,000"},
			{Kind: scenarios.KindDatabase, From: "server", To: "database", Delivery: 1, Text: "transfer 1, COMMIT"},
			{Kind: scenarios.KindAnswer, From: "server", To: "network", Delivery: 1, Text: "201 transfer 1"},
			{Kind: scenarios.KindFault, Lane: "network", Fault: "lose-response", Text: "the server answered 201 transfer 1; the answer was lost on the way back"},
			{Kind: scenarios.KindAttempt, From: "network", To: "Ada", Delivery: 1, Text: "attempt 1: timed out waiting for the response"},
			{Kind: scenarios.KindSend, From: "Ada", To: "network", Delivery: 2, Text: "attempt 2: POST ₦10,000"},
			{Kind: scenarios.KindArrive, From: "network", To: "server", Delivery: 2, Text: "POST ₦10,000"},
			{Kind: scenarios.KindAnswer, From: "server", To: "network", Delivery: 2, Text: "201 transfer 2"},
			{Kind: scenarios.KindAttempt, From: "network", To: "Ada", Delivery: 2, Text: "attempt 2: 201: transfer 2, ₦10,000 from Ada to Bola"},
		},
		Balances: "Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
	}
}

func TestTimelineJoinsUntouchedRequestsAndMarksFaults(t *testing.T) {
	its := items(lostAnswer(), humanizer{})
	var arrows []string
	for _, it := range its {
		if it.kind == "arrow" {
			arrows = append(arrows, it.from+"→"+it.to)
		}
	}
	want := "Ada→server server→database server→network network→Ada Ada→server server→Ada"
	if got := strings.Join(arrows, " "); got != want {
		t.Errorf("arrows\n got %s\nwant %s", got, want)
	}
	if lanes := strings.Join(lanesOf(its), ","); lanes != "Ada,network,server,database" {
		t.Errorf("lanes %s", lanes)
	}
}

func TestTimelineFitsItsWidthWithoutColour(t *testing.T) {
	r := lostAnswer()
	// Six lanes and long labels: the tightest case.
	r.Events = append(r.Events,
		scenarios.Event{Kind: scenarios.KindSend, From: "Bola", To: "network", Delivery: 3, Text: "attempt 1: POST ₦90,000, key 0f0e0d0c-0b0a-4908-8706-050403020100, a long label indeed"},
		scenarios.Event{Kind: scenarios.KindArrive, From: "network", To: "server B", Delivery: 3, Text: "POST"},
		scenarios.Event{Kind: scenarios.KindServer, Lane: "server B", Text: "a note on the server's lane that is far too long for the room to its right, so it must wrap"},
	)
	for _, w := range []int{80, 100} {
		var out bytes.Buffer
		its := items(r, humanizer{})
		d := newDiagram(lanesOf(its), w, newPalette(false))
		d.draw(its)
		d.write(&out)
		for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
			if width(line) > w {
				t.Errorf("width %d: a line of %d columns:\n%s", w, width(line), line)
			}
		}
		s := out.String()
		if strings.Contains(s, "\x1b[") {
			t.Errorf("colour codes without colour")
		}
		for _, want := range []string{"Ada's app", "network", "server", "database", "✕ the server answered", "►", "◄", "» Ada sends ₦10,000"} {
			if !strings.Contains(s, want) {
				t.Errorf("width %d: no %q in\n%s", w, want, s)
			}
		}
	}
}
