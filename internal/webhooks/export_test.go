package webhooks

import "time"

// SetSlotWait sets how long a delivery waits for a slot (a second in
// production), for the tests of package webhooks_test that hold deliveries
// waiting while they look: with room for a loaded machine, none gives up
// before the test lets the slots free.
func (d *Deliverer) SetSlotWait(w time.Duration) { d.slotWait = w }
