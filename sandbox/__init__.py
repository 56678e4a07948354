"""async-RL sandbox: discrete-event simulation of asynchronous RL clusters over toy and small-LM
policies, with the off-policy corrections and stabilizers (GAC, VCPO, M2PO, TIS, ...) as torch
components and theory checks held against simulation."""

__version__ = "0.1.0"
