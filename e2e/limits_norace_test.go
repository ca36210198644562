//go:build !race

package e2e

import "time"

// refusalBudget bounds how long the gateway may take to refuse a 30 MB request; see
// e2e_limits_race_test.go.
const refusalBudget = 5 * time.Second

// placementTimed says whether the placement benchmark's timing-dependent bounds hold (see the
// race build's note).
const placementTimed = true
